"""The process's vector indexes (store/index_registry.py) on SQLite and PostgreSQL:
caught up from the change feed after creates, updates and deletes; a rebuild from
the embeddings table equals the incrementally synced state; snapshots are saved,
loaded and caught up, and refused when they belong to another model, are ahead of
the database or are damaged; changes without vectors make no index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import delete

from store import index_feed
from store import reflections as reflections_repo
from store.database import Database
from store.index_registry import IndexRegistry
from store.models import Reflection
from tests.factories import add_reflection, add_vectors, make_db, unit

MODEL = "test-model"
E0, E1, E2, E3 = unit(1, 0, 0, 0), unit(0, 1, 0, 0), unit(0, 0, 1, 0), unit(0, 0, 0, 1)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    d = make_db(database_url, "mem", "other")
    yield d
    d.dispose()


def registry(db: Database, snapshot_dir: Path | None = None, model: str = MODEL) -> IndexRegistry:
    # A long sync interval: only forced syncs read the feed, unless a test says otherwise.
    return IndexRegistry(db, model=model, dim=4, snapshot_dir=snapshot_dir, sync_interval=3600)


def put(db: Database, id: str, *, namespace: str = "mem", kind: str = "exemplar", **vectors: np.ndarray) -> int:
    with db.write() as s:
        row = add_reflection(s, namespace, id, kind=kind)
        add_vectors(s, row, MODEL, **vectors)
        return row.pk


def revise(db: Database, id: str, **vectors: np.ndarray) -> None:
    with db.write() as s:
        row = reflections_repo.read_reflection(s, "mem", id)
        assert row is not None
        add_vectors(s, row, MODEL, **vectors)


def remove(db: Database, pk: int) -> None:
    """Delete a reflection (its vectors go with it) and put the delete on the feed."""
    with db.write() as s:
        kind = s.get(Reflection, pk).kind  # type: ignore[union-attr]
        index_feed.lock_feed(s, "mem")
        s.execute(delete(Reflection).where(Reflection.pk == pk))
        index_feed.create_changes(s, "mem", [(kind, pk, "delete")])


def contents(reg: IndexRegistry) -> dict[tuple[str, str], list[int]]:
    """(kind, field) -> the ids each index of "mem" holds."""
    out = {}
    for ns, kind, field in reg.sizes():
        if ns == "mem":
            out[(kind, field)] = reg.index(ns, kind, field).ids().tolist()  # type: ignore[union-attr]
    return out


def top(reg: IndexRegistry, query: np.ndarray, kind: str = "exemplar", field: str = "state") -> tuple[int, float]:
    scores, ids = reg.index("mem", kind, field).search(query[None, :], 1)  # type: ignore[union-attr]
    return int(ids[0, 0]), float(scores[0, 0])


def last_seq(db: Database) -> int:
    with db.read() as s:
        return index_feed.read_last_change_seq(s, "mem")


def test_sync_applies_creates_updates_and_deletes_from_the_feed(db: Database) -> None:
    reg = registry(db)
    assert reg.sync("mem", force=True) == 0
    assert reg.index("mem", "exemplar", "state") is None and reg.sizes() == {}

    a = put(db, "a", state=E0, internal=E3)
    b = put(db, "b", state=E1)
    h = put(db, "h", kind="heuristic", state=E2)
    put(db, "x", namespace="other", state=E0)  # another namespace's feed
    assert reg.sync("mem") == 0  # unforced, within the sync interval: the feed is not read
    assert reg.sync("mem", force=True) == 3
    assert contents(reg) == {("exemplar", "state"): [a, b], ("exemplar", "internal"): [a], ("heuristic", "state"): [h]}
    assert reg.sizes() == {
        ("mem", "exemplar", "state"): 2,
        ("mem", "exemplar", "internal"): 1,
        ("mem", "heuristic", "state"): 1,
    }
    assert reg.structures()[("mem", "exemplar", "state")] == ("exact", False)
    assert top(reg, E1) == (b, pytest.approx(1.0))

    # An update replaces the vector under the same id.
    revise(db, "a", state=E2, internal=E3)
    assert reg.sync("mem", force=True) == 1
    assert contents(reg)[("exemplar", "state")] == [a, b]
    assert top(reg, E2) == (a, pytest.approx(1.0))
    assert top(reg, E0)[1] == pytest.approx(0.0, abs=1e-6)  # nothing points along E0 any more

    # A delete takes the id out of every field's index of its kind.
    remove(db, a)
    assert reg.sync("mem", force=True) == 1
    assert contents(reg) == {("exemplar", "state"): [b], ("exemplar", "internal"): [], ("heuristic", "state"): [h]}
    assert reg.sync("mem", force=True) == 0  # caught up


def test_a_rebuild_from_sql_equals_the_incremental_state(db: Database) -> None:
    incremental = registry(db)
    incremental.sync("mem", force=True)  # from here on everything comes through the feed
    a = put(db, "a", state=E0)
    b = put(db, "b", state=E1, internal=E2)
    c = put(db, "c", state=E2)
    remove(db, c)  # created and deleted between two syncs: one feed page holds both
    revise(db, "b", state=E3, internal=E2)
    d = put(db, "d", kind="heuristic", state=E0)
    assert incremental.sync("mem", force=True) == 6
    expected = {("exemplar", "state"): [a, b], ("exemplar", "internal"): [b], ("heuristic", "state"): [d]}
    assert contents(incremental) == expected

    fresh = registry(db)  # no snapshot: its first sync fills from the embeddings table
    assert fresh.sync("mem", force=True) == 0  # nothing left to replay after the rebuild
    assert contents(fresh) == expected
    queries = np.vstack([E0, E1, E2, E3])
    for kind, field in expected:
        got = fresh.index("mem", kind, field).search(queries, 2)  # type: ignore[union-attr]
        want = incremental.index("mem", kind, field).search(queries, 2)  # type: ignore[union-attr]
        assert np.array_equal(got[1], want[1]) and np.allclose(got[0], want[0])
    assert top(fresh, E3) == (b, pytest.approx(1.0))  # b's revised vector, not its first one

    assert incremental.rebuild("mem") == 4  # vectors held after `reflexa reindex`
    assert contents(incremental) == expected


def test_snapshots_are_saved_loaded_and_caught_up(db: Database, tmp_path: Path) -> None:
    snap = tmp_path / "snapshots"
    a = put(db, "a", state=E0)
    b = put(db, "b", state=E1, internal=E2)
    first = registry(db, snap)
    assert first.sync("mem", force=True) == 0  # filled from SQL, nothing to replay
    first.save("mem")
    seq = last_seq(db)
    files = {"exemplar/state": f"exemplar-state-{seq}.faiss", "exemplar/internal": f"exemplar-internal-{seq}.faiss"}
    manifest = json.loads((snap / "mem" / "manifest.json").read_text())
    assert manifest == {"model": MODEL, "dim": 4, "watermark": seq, "files": files}
    assert sorted(p.name for p in (snap / "mem").iterdir()) == sorted([*files.values(), "manifest.json"])

    c = put(db, "c", state=E3)  # after the snapshot
    second = registry(db, snap)
    assert second.sync("mem", force=True) == 1  # loaded the snapshot, replayed only the change after it
    assert contents(second) == {("exemplar", "state"): [a, b, c], ("exemplar", "internal"): [b]}
    second.save("mem")
    newer = last_seq(db)
    assert sorted(p.name for p in (snap / "mem").glob("*.faiss")) == [
        f"exemplar-internal-{newer}.faiss",
        f"exemplar-state-{newer}.faiss",
    ]  # the older files are gone

    # Another model's snapshot is not used: rebuilt from SQL, where that model has no vectors.
    other = registry(db, snap, model="other-model")
    assert other.sync("mem", force=True) == 0 and other.sizes() == {}

    # A snapshot ahead of the database (a restored backup) is not used either.
    remove(db, c)
    manifest = json.loads((snap / "mem" / "manifest.json").read_text())
    (snap / "mem" / "manifest.json").write_text(json.dumps({**manifest, "watermark": last_seq(db) + 1000}))
    ahead = registry(db, snap)
    ahead.sync("mem", force=True)
    assert contents(ahead) == {("exemplar", "state"): [a, b], ("exemplar", "internal"): [b]}  # c is gone in SQL

    # Nor a damaged one.
    (snap / "mem" / "manifest.json").write_text(json.dumps(manifest))
    (snap / "mem" / f"exemplar-state-{newer}.faiss").write_bytes(b"not an index")
    damaged = registry(db, snap)
    assert damaged.sync("mem", force=True) == 0
    assert contents(damaged) == {("exemplar", "state"): [a, b], ("exemplar", "internal"): [b]}


def test_save_is_a_no_op_without_a_directory_or_a_sync(db: Database, tmp_path: Path) -> None:
    put(db, "a", state=E0)
    unsaved = registry(db)
    unsaved.sync("mem", force=True)
    unsaved.save("mem")  # no snapshot directory: nothing to do, no error
    never_synced = registry(db, tmp_path / "snapshots")
    never_synced.save("mem")
    never_synced.save_all()
    assert not (tmp_path / "snapshots").exists()


def test_changes_without_vectors_make_no_index(db: Database, tmp_path: Path) -> None:
    reg = registry(db, tmp_path / "snapshots")
    assert reg.sync("mem", force=True) == 0
    with db.write() as s:  # on the feed, but its only vector is another model's
        row = add_reflection(s, "mem", "a")
        add_vectors(s, row, "other-model", state=E0)
    assert reg.sync("mem", force=True) == 1  # the change is read...
    assert reg.sizes() == {} and reg.index("mem", "exemplar", "state") is None  # ...and holds nothing
    assert reg.rebuild("mem") == 0
    reg.save("mem")
    manifest = json.loads((tmp_path / "snapshots" / "mem" / "manifest.json").read_text())
    assert manifest["files"] == {} and manifest["watermark"] == last_seq(db)
    assert reg.sync("nobody", force=True) == 0 and reg.index("nobody", "exemplar", "state") is None
