"""The retrieval log's tables: a retrieval and what it served, its outcome and the
credit that moves into reflection utility, the holdout counts. Retrieval's own
candidate reads are service/retrieval/repository.py."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Connection,
    Float,
    Integer,
    String,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from store.database import insert_for
from store.models import (
    Namespace,
    Reflection,
    ReflectionServed,
    Retrieval,
    RetrievalHoldout,
    RetrievalItem,
    RetrievalOutcome,
    utcnow,
)


def create_retrieval(
    session: Session,
    *,
    id: str,
    namespace: str,
    query: dict[str, Any],
    trajectory_id: str | None,
    items: Sequence[tuple[int, int, float, float]],
    latency_ms: float | None = None,
    holdouts: Sequence[tuple[int, bool, str]] = (),
    context: str | None = None,
    created_at: datetime | None = None,
) -> None:
    """Log a retrieval, what it served and the context block it rendered (if any):
    items are (reflection pk, rank, score, similarity), holdouts the items put to the
    holdout draw (reflection pk, withheld, unit).
    Core inserts built once, on the session's connection: the ORM unit of work cost a
    fifth of a retrieve's CPU here, building the statements and going through the
    session most of what was left. PostgreSQL takes the whole record in one statement
    (`_logged_pg`, one round trip); SQLite, which has none to save, in up to four."""
    conn = session.connection()
    retrieval = {
        "id": id,
        "namespace": namespace,
        "query": query,
        "trajectory_id": trajectory_id,
        "created_at": created_at or utcnow(),
        "latency_ms": latency_ms,
        "context": context,
    }
    served = sorted({pk for pk, *_ in items})  # key order: see _count_served
    if conn.dialect.name == "postgresql":
        conn.execute(
            _logged_pg(),
            {
                **retrieval,
                "item_pks": [pk for pk, *_ in items],
                "item_ranks": [rank for _, rank, _, _ in items],
                "item_scores": [score for *_, score, _ in items],
                "item_similarities": [sim for *_, sim in items],
                "holdout_pks": [pk for pk, _, _ in holdouts],
                "holdout_withheld": [withheld for _, withheld, _ in holdouts],
                "holdout_units": [unit for *_, unit in holdouts],
                "served_pks": served,
            },
        )
        return
    conn.execute(_INSERT_RETRIEVAL, retrieval)
    if items:
        conn.execute(
            _INSERT_RETRIEVAL_ITEM,
            [
                {"retrieval_id": id, "reflection_pk": pk, "rank": rank, "score": score, "similarity": sim}
                for pk, rank, score, sim in items
            ],
        )
    if holdouts:
        conn.execute(
            _INSERT_HOLDOUT,
            [
                {"retrieval_id": id, "reflection_pk": pk, "withheld": withheld, "unit": unit}
                for pk, withheld, unit in holdouts
            ],
        )
    if served:  # last: the rows it locks are held only until the commit
        _count_served(conn, served)


@functools.cache
def _logged_pg() -> Any:
    """One retrieval's log on PostgreSQL as one statement: the retrieval, its items
    and holdout draws from arrays (`unnest`, in the arrays' order), and one more
    serving for each served item, in key order as `_count_served` (the served pks
    come sorted). The items and draws select from the retrieval's RETURNING, so they
    follow it; every foreign key is checked at the statement's end."""
    r, i, h = Retrieval.__table__, RetrievalItem.__table__, RetrievalHoldout.__table__
    logged = (
        insert(r)
        .values({c: bindparam(c, type_=r.c[c].type) for c in _RETRIEVAL_COLUMNS})
        .returning(r.c.id)
        .cte("logged")
    )
    item_rows = (
        func.unnest(
            bindparam("item_pks", type_=ARRAY(BigInteger)),
            bindparam("item_ranks", type_=ARRAY(Integer)),
            bindparam("item_scores", type_=ARRAY(Float)),
            bindparam("item_similarities", type_=ARRAY(Float)),
        )
        .table_valued("reflection_pk", "rank", "score", "similarity")
        .render_derived("item")
    )
    items = (
        insert(i)
        .from_select(
            ["retrieval_id", "reflection_pk", "rank", "score", "similarity"],
            select(logged.c.id, *item_rows.c).select_from(logged).join(item_rows, true()),
        )
        .cte("items")
    )
    draw_rows = (
        func.unnest(
            bindparam("holdout_pks", type_=ARRAY(BigInteger)),
            bindparam("holdout_withheld", type_=ARRAY(Boolean)),
            bindparam("holdout_units", type_=ARRAY(String())),
        )
        .table_valued("reflection_pk", "withheld", "unit")
        .render_derived("draw")
    )
    draws = (
        insert(h)
        .from_select(
            ["retrieval_id", "reflection_pk", "withheld", "unit"],
            select(logged.c.id, *draw_rows.c).select_from(logged).join(draw_rows, true()),
        )
        .cte("draws")
    )
    served_pks = (
        func.unnest(bindparam("served_pks", type_=ARRAY(BigInteger)))
        .table_valued("reflection_pk")
        .render_derived("served")
    )
    served = pg_insert(ReflectionServed.__table__).from_select(
        ["reflection_pk", "served"], select(served_pks.c.reflection_pk, literal_column("1"))
    )
    served = served.on_conflict_do_update(
        index_elements=["reflection_pk"],
        set_={"served": ReflectionServed.__table__.c.served + served.excluded.served},
    )
    return served.add_cte(logged, items, draws)


_RETRIEVAL_COLUMNS = ("id", "namespace", "query", "trajectory_id", "created_at", "latency_ms", "context")


def _count_served(conn: Connection, reflection_pks: list[int]) -> None:
    """One more serving for each, in key order, so two retrieves serving the same
    items lock their rows in the same order and never deadlock; an item served by
    most retrieves is one row every logged retrieve updates, so on PostgreSQL those
    retrieves' log writes commit one after another. One statement built once per
    dialect, run for each pk: a multi-row VALUES was compiled anew for each count of
    rows, two thirds of the log write's time."""
    conn.execute(_served_upsert(conn.dialect.name), [{"reflection_pk": pk, "served": 1} for pk in reflection_pks])


@functools.cache
def _served_upsert(dialect: str) -> Any:
    stmt = insert_for(dialect)(ReflectionServed.__table__)
    return stmt.on_conflict_do_update(
        index_elements=["reflection_pk"], set_={"served": ReflectionServed.__table__.c.served + stmt.excluded.served}
    )


_INSERT_RETRIEVAL = insert(Retrieval.__table__)
_INSERT_RETRIEVAL_ITEM = insert(RetrievalItem.__table__)
_INSERT_HOLDOUT = insert(RetrievalHoldout.__table__)


@dataclass(frozen=True)
class HoldoutCounts:
    """One item's holdout arms: units (episodes, or lone retrievals) with a
    success/failure outcome, and how many of them succeeded."""

    served_units: int = 0
    served_successes: int = 0
    withheld_units: int = 0
    withheld_successes: int = 0


def list_holdout_counts(
    session: Session, namespace: str, reflection_pks: Sequence[int] | None = None
) -> dict[int, HoldoutCounts]:
    """Per reflection pk (those given, or every one of the namespace put to the draw):
    its holdout arms. A unit is counted once per arm, successful when any of its
    retrievals' outcomes is (an episode's retrievals share the episode's outcome)."""
    h, o = RetrievalHoldout, RetrievalOutcome
    won = func.max(case((o.success.is_(True), 1), else_=0))
    per_unit = (
        select(h.reflection_pk, h.withheld, h.unit, won.label("won"))
        .join(o, o.retrieval_id == h.retrieval_id)
        .join(Reflection, Reflection.pk == h.reflection_pk)
        .where(Reflection.namespace == namespace, o.success.is_not(None))
        .group_by(h.reflection_pk, h.withheld, h.unit)
    )
    if reflection_pks is not None:
        per_unit = per_unit.where(h.reflection_pk.in_(list(reflection_pks)))
    units = per_unit.subquery()
    stmt = select(units.c.reflection_pk, units.c.withheld, func.count(), func.sum(units.c.won)).group_by(
        units.c.reflection_pk, units.c.withheld
    )
    arms: dict[int, dict[str, int]] = {}
    for pk, was_withheld, n, wins in session.execute(stmt):
        arm = arms.setdefault(pk, {})
        prefix = "withheld" if was_withheld else "served"
        arm[f"{prefix}_units"], arm[f"{prefix}_successes"] = int(n), int(wins or 0)
    return {pk: HoldoutCounts(**arm) for pk, arm in arms.items()}


def read_retrieval(session: Session, namespace: str, id: str) -> Retrieval | None:
    row = session.get(Retrieval, id)
    return row if row is not None and row.namespace == namespace else None


def read_logged_ids(session: Session, ids: Sequence[str]) -> set[str]:
    """Which of these retrieval ids are logged."""
    return set(session.scalars(select(Retrieval.id).where(Retrieval.id.in_(list(ids))))) if ids else set()


def read_live_targets(session: Session, namespaces: set[str], reflection_pks: set[int]) -> tuple[set[str], set[int]]:
    """Which of these namespaces and reflection pks still exist (a log record written
    after its answer may name ones deleted meanwhile)."""
    names = set(session.scalars(select(Namespace.name).where(Namespace.name.in_(sorted(namespaces)))))
    pks = set(session.scalars(select(Reflection.pk).where(Reflection.pk.in_(sorted(reflection_pks)))))
    return names, pks


def read_served_ids(session: Session, retrieval_id: str) -> set[str]:
    """The reflection ids a retrieval served (that still exist)."""
    stmt = (
        select(Reflection.id)
        .join(RetrievalItem, RetrievalItem.reflection_pk == Reflection.pk)
        .where(RetrievalItem.retrieval_id == retrieval_id)
    )
    return set(session.scalars(stmt))


def read_outcome(session: Session, retrieval_id: str) -> RetrievalOutcome | None:
    return session.get(RetrievalOutcome, retrieval_id)


def create_outcome(
    session: Session,
    namespace: str,
    retrieval_id: str,
    *,
    success: bool | None,
    reward: float | None,
    trajectory_id: str | None,
    details: dict[str, Any] | None,
    item_ids: Sequence[str] | None = None,
    max_rank: int | None = None,
    credit: bool = True,
) -> int:
    """Store the outcome and credit the items the retrieval served: all of them, or
    only `item_ids` (reflection ids the caller checked were served), or only those
    served at a rank below `max_rank`. Counters are updated in SQL, so concurrent
    credits never lose an increment. Returns the number of items credited. The
    caller checks there is no outcome yet. `credit=False` (a frozen namespace)
    records the outcome and changes no counter."""
    session.add(
        RetrievalOutcome(
            retrieval_id=retrieval_id,
            item_ids=None if item_ids is None else list(item_ids),
            success=success,
            reward=reward,
            trajectory_id=trajectory_id,
            details=details,
            created_at=utcnow(),
        )
    )
    mine = RetrievalItem.retrieval_id == retrieval_id
    if not credit:
        session.flush()
        session.execute(update(RetrievalItem).where(mine).values(credited=False))
        return 0
    served = select(RetrievalItem.reflection_pk).where(mine)
    chosen: Any = true()  # which served items the outcome credits
    if max_rank is not None:
        served = served.where(RetrievalItem.rank < max_rank)
        chosen = RetrievalItem.rank < max_rank
    if item_ids is not None:
        named = select(Reflection.pk).where(Reflection.namespace == namespace, Reflection.id.in_(list(item_ids)))
        chosen = and_(chosen, RetrievalItem.reflection_pk.in_(named))
    # Recorded per item, beside the counters: which items an outcome credits depends
    # on item_ids, credit.unnamed_top_k and the freeze at this moment (docs/ui.md).
    session.execute(update(RetrievalItem).where(mine).values(credited=case((chosen, True), else_=False)))
    values: dict[str, Any] = {"uses": Reflection.uses + 1}
    if success is True:
        values["successes"] = Reflection.successes + 1
    elif success is False:
        values["failures"] = Reflection.failures + 1
    if reward is not None:
        values["reward_sum"] = Reflection.reward_sum + reward
    target = Reflection.pk.in_(served)
    if item_ids is not None:
        target = and_(target, Reflection.id.in_(list(item_ids)))
    result = session.execute(update(Reflection).where(target).values(**values))
    if success is not None:
        session.execute(
            update(Namespace)
            .where(Namespace.name == namespace)
            .values(
                outcome_total=Namespace.outcome_total + 1,
                outcome_successes=Namespace.outcome_successes + (1 if success else 0),
            )
        )
    return result.rowcount or 0


def list_open_retrievals(session: Session, namespace: str, trajectory_id: str, extra_ids: Sequence[str]) -> list[str]:
    """Retrievals linked to an episode (by trajectory_id or listed in its
    retrieval_ids) that have no outcome yet."""
    linked = Retrieval.trajectory_id == trajectory_id
    if extra_ids:
        linked = linked | Retrieval.id.in_(list(extra_ids))
    stmt = select(Retrieval.id).where(
        Retrieval.namespace == namespace,
        linked,
        ~exists().where(RetrievalOutcome.retrieval_id == Retrieval.id),
    )
    return list(session.scalars(stmt))
