"""The retrieval log's tables (store/retrievals.py) on SQLite and PostgreSQL: the
retrieval log; outcome credit to every served item, only the ones
acted on or only the top ranks, with the namespace's outcome counters; open
retrievals of an episode."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from store import namespaces as namespaces_repo
from store import retrievals as retrievals_repo
from store.database import Database
from store.models import Reflection, ReflectionServed, Retrieval, RetrievalHoldout, RetrievalItem


def served(cited_db: Database, rid: str, cited_pks: list[int]) -> None:
    with cited_db.write() as s:
        retrievals_repo.create_retrieval(
            s,
            id=rid,
            namespace="mem",
            query={"state": {"observation": "o"}},
            trajectory_id=None,
            items=[(pk, rank, 1.0 - rank / 10, 0.9 - rank / 10) for rank, pk in enumerate(cited_pks)],
        )


def utility(cited_db: Database, id: str) -> tuple[int, int, int, float]:
    with cited_db.read() as s:
        row = s.scalars(select(Reflection).where(Reflection.namespace == "mem", Reflection.id == id)).one()
        return row.uses, row.successes, row.failures, row.reward_sum


def credit_flags(cited_db: Database, rid: str) -> dict[int, bool | None]:
    """Served pk -> whether the retrieval's outcome credited it (what the UI shows)."""
    with cited_db.read() as s:
        stmt = select(RetrievalItem.reflection_pk, RetrievalItem.credited).where(RetrievalItem.retrieval_id == rid)
        return {pk: flag for pk, flag in s.execute(stmt)}


def outcome_counters(cited_db: Database) -> tuple[int, int]:
    with cited_db.read() as s:
        inputs = namespaces_repo.read_ranking_inputs(s, "mem")
        assert inputs is not None
        return inputs[1], inputs[2]


def test_a_retrieval_is_logged_with_what_it_served(cited_db: Database, cited_pks: dict[str, int]) -> None:
    with cited_db.write() as s:
        retrievals_repo.create_retrieval(
            s,
            id="r_1",
            namespace="mem",
            query={"state": {"observation": "a kitchen"}, "k": 2},
            trajectory_id="ep",
            items=[(cited_pks["tea"], 0, 0.75, 0.5), (cited_pks["both"], 1, 0.25, 0.125)],
        )
        retrievals_repo.create_retrieval(s, id="r_empty", namespace="mem", query={}, trajectory_id=None, items=[])
    with cited_db.read() as s:
        row = retrievals_repo.read_retrieval(s, "mem", "r_1")
        assert row is not None
        assert (row.query, row.trajectory_id) == ({"state": {"observation": "a kitchen"}, "k": 2}, "ep")
        assert retrievals_repo.read_retrieval(s, "other", "r_1") is None
        assert retrievals_repo.read_retrieval(s, "mem", "r_nope") is None
        assert retrievals_repo.read_served_ids(s, "r_1") == {"tea", "both"}
        assert retrievals_repo.read_served_ids(s, "r_empty") == set()
        items = s.execute(
            select(RetrievalItem.reflection_pk, RetrievalItem.rank, RetrievalItem.score, RetrievalItem.similarity)
            .where(RetrievalItem.retrieval_id == "r_1")
            .order_by(RetrievalItem.rank)
        ).all()
        assert [tuple(i) for i in items] == [(cited_pks["tea"], 0, 0.75, 0.5), (cited_pks["both"], 1, 0.25, 0.125)]
        assert retrievals_repo.read_outcome(s, "r_1") is None


def test_a_retrieval_logs_its_holdout_draws_and_every_item_as_given(
    cited_db: Database, cited_pks: dict[str, int]
) -> None:
    """All four parts of a record (PostgreSQL writes them in one statement): items in
    the order given, not the pks' order, with their scores to the bit; the draws with
    their arms and units; a record with draws and no items counts no serving."""
    tea, both = cited_pks["tea"], cited_pks["both"]
    items = [(both, 0, 0.1 + 0.2, 1 / 3), (tea, 1, -0.0, 2.5e-300)]
    with cited_db.write() as s:
        retrievals_repo.create_retrieval(
            s,
            id="r_draws",
            namespace="mem",
            query={"state": {"observation": "ünïcode 'quoted' \"x\""}},
            trajectory_id="ep-1",
            items=items,
            holdouts=[(both, False, "ep-1"), (tea, True, "ep-1")],
            context="## Memory\n- tea",
            latency_ms=12.5,
        )
        retrievals_repo.create_retrieval(
            s, id="r_withheld", namespace="mem", query={}, trajectory_id=None, items=[], holdouts=[(tea, True, "u")]
        )
    with cited_db.read() as s:
        logged = s.execute(
            select(RetrievalItem.reflection_pk, RetrievalItem.rank, RetrievalItem.score, RetrievalItem.similarity)
            .where(RetrievalItem.retrieval_id == "r_draws")
            .order_by(RetrievalItem.rank)
        ).all()
        assert [tuple(i) for i in logged] == items
        draws = s.execute(
            select(
                RetrievalHoldout.retrieval_id,
                RetrievalHoldout.reflection_pk,
                RetrievalHoldout.withheld,
                RetrievalHoldout.unit,
            ).order_by(RetrievalHoldout.retrieval_id, RetrievalHoldout.reflection_pk)
        ).all()
        assert sorted(tuple(d) for d in draws) == sorted(
            [("r_draws", both, False, "ep-1"), ("r_draws", tea, True, "ep-1"), ("r_withheld", tea, True, "u")]
        )
        row = s.execute(select(Retrieval).where(Retrieval.id == "r_draws")).scalar_one()
        assert (row.query, row.trajectory_id, row.latency_ms) == (
            {"state": {"observation": "ünïcode 'quoted' \"x\""}},
            "ep-1",
            12.5,
        )
        assert row.created_at.tzinfo is not None
        counted = dict(s.execute(select(ReflectionServed.reflection_pk, ReflectionServed.served)).tuples().all())
        assert counted == {both: 1, tea: 1}


def test_a_record_naming_a_missing_reflection_writes_nothing(cited_db: Database, cited_pks: dict[str, int]) -> None:
    """A reflection deleted since serving fails the whole record with an IntegrityError
    (the retrieval log then writes it without that item: service/retrieval/log.py), and
    leaves none of its rows behind."""
    missing = max(cited_pks.values()) + 1000
    for items, holdouts in (
        ([(cited_pks["tea"], 0, 0.5, 0.5), (missing, 1, 0.5, 0.5)], []),
        ([], [(missing, True, "u")]),
    ):
        with pytest.raises(IntegrityError), cited_db.write() as s:
            retrievals_repo.create_retrieval(
                s, id="r_gone", namespace="mem", query={}, trajectory_id=None, items=items, holdouts=holdouts
            )
    with cited_db.read() as s:
        assert s.scalar(select(func.count()).select_from(Retrieval)) == 0
        assert s.scalar(select(func.count()).select_from(RetrievalItem)) == 0
        assert s.scalar(select(func.count()).select_from(ReflectionServed)) == 0


def test_each_logged_serving_counts_in_the_served_rollup(cited_db: Database, cited_pks: dict[str, int]) -> None:
    """reflection_served is the log's count of retrieval items per reflection, kept by
    the log's writes (items given in any order); a deleted reflection takes its row."""
    served = [[cited_pks["tea"], cited_pks["both"]], [cited_pks["both"], cited_pks["tea"]], [cited_pks["both"]], []]
    for n, chosen in enumerate(served):
        with cited_db.write() as s:
            items = [(pk, rank, 0.5, 0.5) for rank, pk in enumerate(chosen)]
            retrievals_repo.create_retrieval(s, id=f"r_{n}", namespace="mem", query={}, trajectory_id=None, items=items)

    def rollup() -> dict[int, int]:
        with cited_db.read() as s:
            counted = dict(s.execute(select(ReflectionServed.reflection_pk, ReflectionServed.served)).tuples().all())
            logged = s.execute(
                select(RetrievalItem.reflection_pk, func.count()).group_by(RetrievalItem.reflection_pk)
            ).tuples()
            assert counted == dict(logged.all())
            return counted

    assert rollup() == {cited_pks["tea"]: 2, cited_pks["both"]: 3}
    with cited_db.write() as s:
        s.execute(delete(Reflection).where(Reflection.pk == cited_pks["both"]))
    assert rollup() == {cited_pks["tea"]: 2}


def test_outcomes_credit_the_served_items_and_count_in_the_namespace(
    cited_db: Database, cited_pks: dict[str, int]
) -> None:
    assert outcome_counters(cited_db) == (0, 0)
    # Every served item is credited when the outcome names none.
    served(cited_db, "r_all", [cited_pks["tea"], cited_pks["coffee"]])
    with cited_db.write() as s:
        credited = retrievals_repo.create_outcome(
            s, "mem", "r_all", success=True, reward=0.5, trajectory_id="ep", details={"turns": 3}
        )
        assert credited == 2
    assert utility(cited_db, "tea") == utility(cited_db, "coffee") == (1, 1, 0, 0.5)
    assert utility(cited_db, "both") == (0, 0, 0, 0.0)  # not served
    assert outcome_counters(cited_db) == (1, 1)
    assert credit_flags(cited_db, "r_all") == {cited_pks["tea"]: True, cited_pks["coffee"]: True}
    with cited_db.read() as s:
        out = retrievals_repo.read_outcome(s, "r_all")
        assert out is not None
        assert (out.item_ids, out.success, out.reward, out.trajectory_id, out.details) == (
            None,
            True,
            0.5,
            "ep",
            {"turns": 3},
        )

    # Only the items acted on, when it names them; a named item that was not served gets nothing.
    served(cited_db, "r_some", [cited_pks["tea"], cited_pks["coffee"]])
    with cited_db.write() as s:
        credited = retrievals_repo.create_outcome(
            s,
            "mem",
            "r_some",
            success=False,
            reward=None,
            trajectory_id=None,
            details=None,
            item_ids=["coffee", "both"],
        )
        assert credited == 1
    assert utility(cited_db, "coffee") == (2, 1, 1, 0.5)
    assert utility(cited_db, "tea") == (1, 1, 0, 0.5)
    assert utility(cited_db, "both") == (0, 0, 0, 0.0)
    assert outcome_counters(cited_db) == (1, 2)
    assert credit_flags(cited_db, "r_some") == {cited_pks["tea"]: False, cited_pks["coffee"]: True}
    with cited_db.read() as s:
        assert retrievals_repo.read_outcome(s, "r_some").item_ids == ["coffee", "both"]  # type: ignore[union-attr]

    # Only the top ranks, when a rank bound is given (ranks 0 and 1 of 0, 1, 2).
    served(cited_db, "r_top", [cited_pks["both"], cited_pks["coffee"], cited_pks["tea"]])
    with cited_db.write() as s:
        credited = retrievals_repo.create_outcome(
            s, "mem", "r_top", success=True, reward=None, trajectory_id=None, details=None, max_rank=2
        )
        assert credited == 2
    assert utility(cited_db, "both") == (1, 1, 0, 0.0)
    assert utility(cited_db, "coffee") == (3, 2, 1, 0.5)
    assert utility(cited_db, "tea") == (1, 1, 0, 0.5)  # served third: not credited
    assert outcome_counters(cited_db) == (2, 3)
    assert credit_flags(cited_db, "r_top") == {
        cited_pks["both"]: True,
        cited_pks["coffee"]: True,
        cited_pks["tea"]: False,
    }

    # A frozen namespace records the outcome and credits nothing; so do the flags.
    served(cited_db, "r_frozen", [cited_pks["tea"]])
    assert credit_flags(cited_db, "r_frozen") == {cited_pks["tea"]: None}  # no outcome yet
    with cited_db.write() as s:
        assert (
            retrievals_repo.create_outcome(
                s, "mem", "r_frozen", success=True, reward=None, trajectory_id=None, details=None, credit=False
            )
            == 0
        )
    assert credit_flags(cited_db, "r_frozen") == {cited_pks["tea"]: False}
    assert utility(cited_db, "tea") == (1, 1, 0, 0.5)
    assert outcome_counters(cited_db) == (2, 3)

    # No success value: used and rewarded, but neither a success nor a failure, and not in the baseline.
    served(cited_db, "r_reward", [cited_pks["tea"]])
    with cited_db.write() as s:
        assert (
            retrievals_repo.create_outcome(
                s, "mem", "r_reward", success=None, reward=-1.5, trajectory_id=None, details=None
            )
            == 1
        )
    assert utility(cited_db, "tea") == (2, 1, 0, -1.0)
    assert outcome_counters(cited_db) == (2, 3)
    # A retrieval that served nothing credits nothing, yet its outcome counts.
    served(cited_db, "r_none", [])
    with cited_db.write() as s:
        assert (
            retrievals_repo.create_outcome(
                s, "mem", "r_none", success=True, reward=None, trajectory_id=None, details=None
            )
            == 0
        )
    assert outcome_counters(cited_db) == (3, 4)
    with cited_db.read() as s:
        assert namespaces_repo.read_ranking_inputs(s, "other")[1:3] == (0, 0)  # type: ignore[index]


def test_open_retrievals_of_an_episode(cited_db: Database, cited_pks: dict[str, int]) -> None:
    with cited_db.write() as s:
        for rid, ns, trajectory_id in (
            ("r_linked", "mem", "ep"),
            ("r_done", "mem", "ep"),
            ("r_listed", "mem", None),
            ("r_unrelated", "mem", "another"),
            ("r_elsewhere", "other", "ep"),
        ):
            retrievals_repo.create_retrieval(s, id=rid, namespace=ns, query={}, trajectory_id=trajectory_id, items=[])
        retrievals_repo.create_outcome(s, "mem", "r_done", success=True, reward=None, trajectory_id="ep", details=None)
    with cited_db.read() as s:
        assert sorted(retrievals_repo.list_open_retrievals(s, "mem", "ep", [])) == ["r_linked"]
        assert sorted(retrievals_repo.list_open_retrievals(s, "mem", "ep", ["r_listed", "r_done", "r_elsewhere"])) == [
            "r_linked",
            "r_listed",
        ]
        assert retrievals_repo.list_open_retrievals(s, "mem", "nobody", []) == []
        assert retrievals_repo.list_open_retrievals(s, "other", "ep", []) == ["r_elsewhere"]
