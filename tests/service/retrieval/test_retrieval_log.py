"""service/retrieval/log.py's careful write on SQLite and PostgreSQL: a record written
after its answer may name a namespace or a reflection deleted since serving, or be
written already (a replay); it is written without what is gone, once."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from service.retrieval.log import LogRecord, RetrievalLog
from store.database import Database
from store.models import Retrieval, RetrievalHoldout, RetrievalItem, utcnow


def record(id: str, namespace: str, pks: list[int]) -> LogRecord:
    return LogRecord(
        id=id,
        namespace=namespace,
        query={"state": {"observation": "o"}},
        trajectory_id=None,
        created_at=utcnow(),
        latency_ms=1.0,
        items=[(pk, rank, 1.0, 0.9) for rank, pk in enumerate(pks)],
        holdouts=[(pk, False, "u") for pk in pks],
    )


def test_gone_targets_are_left_out_and_a_replay_writes_nothing_twice(
    cited_db: Database, cited_pks: dict[str, int], tmp_path: Path
) -> None:
    log = RetrievalLog(cited_db, tmp_path / "journal")
    live = sorted(cited_pks.values())[:2]
    gone = max(cited_pks.values()) + 1000  # a reflection deleted since serving
    finish = log.defer([record("r_kept", "mem", [*live, gone]), record("r_no_namespace", "deleted-namespace", live)])
    finish()
    finish_again = log.defer([record("r_kept", "mem", live)])  # replayed: already written
    finish_again()
    with cited_db.read() as s:
        assert s.scalars(select(Retrieval.id)).all() == ["r_kept"]
        assert sorted(s.scalars(select(RetrievalItem.reflection_pk))) == live
        assert sorted(s.scalars(select(RetrievalHoldout.reflection_pk))) == live
        assert s.scalar(select(func.count()).select_from(RetrievalItem)) == len(live)
    assert log.journal.pending == 0  # each record marked done once written


def test_one_record_naming_a_gone_reflection_is_written_without_it(
    cited_db: Database, cited_pks: dict[str, int], tmp_path: Path
) -> None:
    """One record is one statement on PostgreSQL, run with no transaction around it:
    the gone reflection fails it as a whole, and the careful write lands the rest."""
    log = RetrievalLog(cited_db, tmp_path / "journal")
    live = sorted(cited_pks.values())[:2]
    gone = max(cited_pks.values()) + 1000
    log.defer([record("r_single", "mem", [gone, *live])])()
    log.write_now([record("r_inline", "mem", live)])
    with cited_db.read() as s:
        assert sorted(s.scalars(select(Retrieval.id))) == ["r_inline", "r_single"]
        items = s.execute(select(RetrievalItem.retrieval_id, RetrievalItem.reflection_pk)).tuples().all()
        assert sorted(items) == sorted([("r_single", pk) for pk in live] + [("r_inline", pk) for pk in live])
    assert log.journal.pending == 0
