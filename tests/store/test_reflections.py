"""Reflection rows and their evidence in the store (store/reflections.py,
store/evidence.py) on SQLite and PostgreSQL: create, read and list (filters,
newest-first keyset pages), edits as new versions with the history kept, status
changes recorded, evidence links and the statistics kept on the row, and deleting
a trajectory's evidence (orphans deleted and fed to the index feed as deletes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from store import evidence as evidence_repo
from store import index_feed
from store import reflections as reflections_repo
from store.database import Database
from store.evidence import EvidenceIn
from store.models import Embedding, Reflection, ReflectionEvidence
from store.reflections import ReflectionFilters
from tests.factories import add_reflection, add_trajectory, add_vectors, make_db, unit


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    d = make_db(database_url, "mem", "other")
    yield d
    d.dispose()


def history(db: Database, id: str) -> list[tuple[int, str, str, str, str | None]]:
    """(version, action, status, actor, note) of each recorded version, oldest first."""
    with db.read() as s:
        row = reflections_repo.read_reflection(s, "mem", id)
        assert row is not None
        return [
            (v.version, v.action, v.status, v.actor, v.note)
            for v in reflections_repo.list_reflection_versions(s, row.pk)
        ]


def test_create_and_read(db: Database) -> None:
    with db.write() as s:
        row = add_reflection(
            s, "mem", "h1", kind="heuristic", content={"guideline": "g"}, environment="house", actor="reflector:x"
        )
        pk = row.pk
        add_reflection(s, "other", "h1", kind="heuristic")  # the same id in another namespace
    with db.read() as s:
        got = reflections_repo.read_reflection(s, "mem", "h1")
        assert got is not None and got.pk == pk
        assert (got.kind, got.status, got.version, got.content, got.environment) == (
            "heuristic",
            "candidate",
            1,
            {"guideline": "g"},
            "house",
        )
        assert (got.evidence_count, got.uses, got.successes, got.failures, got.reward_sum) == (0, 0, 0, 0, 0.0)
        assert got.created_at == got.updated_at
        assert reflections_repo.read_reflection(s, "mem", "nope") is None
        assert reflections_repo.read_reflection(s, "other", "h1").pk != pk  # type: ignore[union-attr]
        found = reflections_repo.read_reflections_by_ids(s, "mem", ["h1", "nope"])
        assert list(found) == ["h1"] and found["h1"].pk == pk
        assert reflections_repo.read_reflections_by_ids(s, "mem", []) == {}
        [created] = reflections_repo.list_reflection_versions(s, pk)
        assert (created.version, created.action, created.status, created.actor, created.content) == (
            1,
            "create",
            "candidate",
            "reflector:x",
            {"guideline": "g"},
        )


def test_list_filters_and_keyset_pages_newest_first(db: Database) -> None:
    rows = [
        ("e1", "exemplar", "active", "house", "exemplar"),
        ("h1", "heuristic", "candidate", "house", "contrastive"),
        ("e2", "exemplar", "retired", "garden", "exemplar"),
        ("h2", "heuristic", "active", None, "llm_heuristics"),
        ("e3", "exemplar", "active", "garden", "exemplar"),
    ]
    with db.write() as s:
        pks = {
            id: add_reflection(s, "mem", id, kind=kind, status=status, environment=env, reflector=reflector).pk
            for id, kind, status, env, reflector in rows
        }
        add_reflection(s, "other", "o1")

    def ids(f: ReflectionFilters = ReflectionFilters(), before: str | None = None, limit: int = 10) -> list[str]:
        with db.read() as s:
            before_pk = None if before is None else pks[before]
            return [r.id for r in reflections_repo.list_reflections(s, "mem", f, before_pk=before_pk, limit=limit)]

    assert ids() == ["e3", "h2", "e2", "h1", "e1"]
    assert ids(ReflectionFilters(kind="exemplar")) == ["e3", "e2", "e1"]
    assert ids(ReflectionFilters(status="active")) == ["e3", "h2", "e1"]
    assert ids(ReflectionFilters(environment="garden")) == ["e3", "e2"]
    assert ids(ReflectionFilters(reflector="contrastive")) == ["h1"]
    assert ids(ReflectionFilters(kind="exemplar", status="active", environment="house")) == ["e1"]
    assert ids(ReflectionFilters(kind="skill")) == []
    # Pages: each continues below the last pk of the one before.
    assert ids(limit=2) == ["e3", "h2"]
    assert ids(before="h2", limit=2) == ["e2", "h1"]
    assert ids(before="h1", limit=2) == ["e1"]
    assert ids(ReflectionFilters(kind="exemplar"), before="e3", limit=1) == ["e2"]


def test_an_edit_is_a_new_version_and_the_history_keeps_every_one(db: Database) -> None:
    with db.write() as s:
        row = add_reflection(s, "mem", "x", content={"v": 1}, text="first", actor="reflector:x")
        created_at = row.created_at
    with db.write() as s:
        row = reflections_repo.read_reflection(s, "mem", "x")
        reflections_repo.update_reflection(s, row, content={"v": 2}, text=None, actor="key:op", note="typo")  # type: ignore[arg-type]
    with db.write() as s:
        row = reflections_repo.read_reflection(s, "mem", "x")
        reflections_repo.update_reflection(s, row, content={"v": 3}, text="third", actor="key:op", note=None)  # type: ignore[arg-type]
    with db.read() as s:
        row = reflections_repo.read_reflection(s, "mem", "x")
        assert row is not None
        assert (row.version, row.content, row.text, row.status) == (3, {"v": 3}, "third", "candidate")
        assert row.updated_at > created_at and row.created_at == created_at
        versions = reflections_repo.list_reflection_versions(s, row.pk)
        assert [v.content for v in versions] == [{"v": 1}, {"v": 2}, {"v": 3}]
    assert history(db, "x") == [
        (1, "create", "candidate", "reflector:x", None),
        (2, "edit", "candidate", "key:op", "typo"),
        (3, "edit", "candidate", "key:op", None),
    ]


def test_status_changes_are_recorded_without_a_new_version(db: Database) -> None:
    with db.write() as s:
        add_reflection(s, "mem", "x", content={"v": 1})
    for status, action, note in (("active", "approve", "looks right"), ("retired", "retire", "misleading")):
        with db.write() as s:
            row = reflections_repo.read_reflection(s, "mem", "x", for_update=True)
            reflections_repo.update_reflection_status(s, row, status, action=action, actor="key:op", note=note)  # type: ignore[arg-type]
    with db.read() as s:
        row = reflections_repo.read_reflection(s, "mem", "x")
        assert row is not None and (row.status, row.version, row.content) == ("retired", 1, {"v": 1})
    assert history(db, "x") == [
        (1, "create", "candidate", "test", None),
        (1, "approve", "active", "key:op", "looks right"),
        (1, "retire", "retired", "key:op", "misleading"),
    ]


def stats(db: Database, id: str) -> tuple[int, int, int, float | None]:
    with db.read() as s:
        row = reflections_repo.read_reflection(s, "mem", id)
        assert row is not None
        return row.evidence_count, row.evidence_successes, row.evidence_failures, row.evidence_value


def test_evidence_links_and_the_statistics_on_the_row(db: Database) -> None:
    with db.write() as s:
        t1, t2, t3 = (add_trajectory(s, "mem", f"t{i}") for i in (1, 2, 3))
        pk = add_reflection(s, "mem", "x").pk
        links = [
            EvidenceIn(t1, 0, 0, success=True, value=1.0),
            EvidenceIn(t2, 1, 2, success=False, value=0.0),
            EvidenceIn(t3, 0, 0, success=None, value=None),
        ]
        evidence_repo.create_evidence(s, pk, links)
        evidence_repo.create_evidence(s, pk, links[:2])  # a re-run job: stored once
        assert evidence_repo.create_evidence(s, pk, []) == 0
        evidence_repo.update_evidence_stats(s, [pk])
    # 3 links, 1 credited success, 1 failure, the mean of the values given (1.0 and 0.0).
    assert stats(db, "x") == (3, 1, 1, 0.5)
    with db.read() as s:
        assert [(e.trajectory_pk, e.step_start, e.step_end) for e in evidence_repo.list_evidence(s, [pk])[pk]] == [
            (t1, 0, 0),
            (t2, 1, 2),
            (t3, 0, 0),
        ]
        assert evidence_repo.list_evidence_trajectory_pks(s, pk) == {t1, t2, t3}
        assert evidence_repo.cites_trajectory(s, pk, t2) and not evidence_repo.cites_trajectory(s, pk, t2 + 100)
        assert evidence_repo.read_evidence_value_sums(s, [pk]) == {pk: 1.0}
        # The newest link first, as (trajectory id, step range).
        assert evidence_repo.list_evidence_summaries(s, [pk], 2) == {pk: [("t3", 0, 0), ("t2", 1, 2)]}

    # Replacing the evidence drops the links not named again and recomputes the statistics.
    with db.write() as s:
        evidence_repo.update_evidence(
            s, pk, [EvidenceIn(t2, 1, 2, success=True, value=3.0), EvidenceIn(t3, None, None, success=True, value=1.0)]
        )
    assert stats(db, "x") == (2, 2, 0, 2.0)
    with db.read() as s:
        assert evidence_repo.list_evidence_trajectory_pks(s, pk) == {t2, t3}
        assert evidence_repo.read_evidence_value_sums(s, [pk, pk + 100]) == {pk: 4.0, pk + 100: 0.0}
    with db.write() as s:
        evidence_repo.update_evidence(s, pk, [])
    assert stats(db, "x") == (0, 0, 0, None)


def test_create_evidence_counts_the_new_links(db: Database) -> None:
    with db.write() as s:
        t1, t2 = add_trajectory(s, "mem", "t1"), add_trajectory(s, "mem", "t2")
        pk = add_reflection(s, "mem", "x").pk
        assert evidence_repo.create_evidence(s, pk, [EvidenceIn(t1, 0, 0), EvidenceIn(t2, 1, 2)]) == 2
        assert evidence_repo.create_evidence(s, pk, [EvidenceIn(t1, 0, 0), EvidenceIn(t1, 1, 1)]) == 1


def test_a_whole_trajectory_link_is_stored_once(db: Database) -> None:
    with db.write() as s:
        t1 = add_trajectory(s, "mem", "t1")
        pk = add_reflection(s, "mem", "x").pk
        evidence_repo.create_evidence(s, pk, [EvidenceIn(t1, None, None)])
        evidence_repo.create_evidence(s, pk, [EvidenceIn(t1, None, None)])  # a re-run job
        assert len(evidence_repo.list_evidence(s, [pk])[pk]) == 1


def test_deleting_a_trajectorys_evidence_deletes_orphans_through_the_feed(db: Database) -> None:
    with db.write() as s:
        t1, t2 = add_trajectory(s, "mem", "t1"), add_trajectory(s, "mem", "t2")
        only = add_reflection(s, "mem", "only", kind="exemplar")
        shared = add_reflection(s, "mem", "shared", kind="heuristic")
        add_vectors(s, only, "m", state=unit(1, 0))
        only_pk, shared_pk = only.pk, shared.pk
        evidence_repo.create_evidence(s, only_pk, [EvidenceIn(t1, 0, 1, success=True, value=1.0)])
        evidence_repo.create_evidence(
            s,
            shared_pk,
            [EvidenceIn(t1, 0, 0, success=True, value=1.0), EvidenceIn(t2, 0, 0, success=False, value=-1.0)],
        )
        evidence_repo.update_evidence_stats(s, [only_pk, shared_pk])
        seq = index_feed.read_last_change_seq(s, "mem")
    assert stats(db, "shared") == (2, 1, 1, 0.0)

    with db.write() as s:
        assert evidence_repo.delete_trajectory_evidence(s, "mem", t1) == (1, [shared_pk])
    with db.read() as s:
        assert s.scalars(select(Reflection.id).where(Reflection.namespace == "mem")).all() == ["shared"]
        assert s.scalar(select(func.count()).select_from(Embedding)) == 0  # the orphan's vectors went with it
        assert s.scalars(select(ReflectionEvidence.trajectory_pk)).all() == [t2]
        changes = index_feed.list_changes_after(s, "mem", seq, 10)
        assert [(c.kind, c.reflection_pk, c.op) for c in changes] == [("exemplar", only_pk, "delete")]
    assert stats(db, "shared") == (1, 0, 1, -1.0)

    # Nothing cited: nothing deleted, nothing fed.
    with db.write() as s:
        assert evidence_repo.delete_trajectory_evidence(s, "mem", t1) == (0, [])
        last = index_feed.read_last_change_seq(s, "mem")
    assert last == changes[-1].seq
    # The last source goes: the shared one is an orphan now.
    with db.write() as s:
        assert evidence_repo.delete_trajectory_evidence(s, "mem", t2) == (1, [])
    with db.read() as s:
        assert reflections_repo.read_reflection(s, "mem", "shared") is None
        assert [(c.kind, c.reflection_pk, c.op) for c in index_feed.list_changes_after(s, "mem", last, 10)] == [
            ("heuristic", shared_pk, "delete")
        ]
