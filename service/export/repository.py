"""The reads only dataset exports make (GET …/export), keyset-batched: tasks with
both a won and a lost attempt (where preference pairs can be) and the evidence of
active heuristics citing a batch of trajectories. The trajectories and steps
themselves come from store.trajectory_reader, filtered by its TrajectoryFilter.

Every read goes through store.snapshots' views, so one query serves live and
pinned data; each is one bounded statement the caller runs in a short read unit
of its own, none holds a transaction across a stream. Statements are built once
per shape and run batch after batch with new parameters (see
store.trajectory_reader for why).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, bindparam, case, func, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import Session

from store.snapshots import evidence_view, reflection_view, trajectory_view
from store.trajectory_reader import MAX_IN, TrajectoryFilter


@lru_cache(maxsize=32)
def _tasks_statement(namespace: str, snapshot_pk: int | None, filters: TrajectoryFilter, limit: int) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    v = view.c
    inner = (
        select(v.task_hash, v.success)
        .where(*filters.clauses(v), v.status == "closed", v.success.is_not(None))
        .subquery("m")
    )
    won = func.sum(case((inner.c.success.is_(True), 1), else_=0))
    lost = func.sum(case((inner.c.success.is_(False), 1), else_=0))
    return (
        select(inner.c.task_hash)
        .where(inner.c.task_hash > bindparam("after_task_hash"))
        .group_by(inner.c.task_hash)
        .having(won > 0, lost > 0)
        .order_by(inner.c.task_hash)
        .limit(limit)
    )


def read_contrasted_tasks(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    filters: TrajectoryFilter,
    *,
    after_task_hash: str | None,
    limit: int,
) -> list[str]:
    """Task hashes (in order, after `after_task_hash`) with both a successful and a
    failed closed trajectory among those matching: where preference pairs can be."""
    stmt = _tasks_statement(namespace, snapshot_pk, filters, limit)
    return list(session.scalars(stmt, {"after_task_hash": after_task_hash or ""}))


@lru_cache(maxsize=128)
def _heuristics_statement(namespace: str, snapshot_pk: int | None) -> Select[Any]:
    rv = reflection_view(namespace, snapshot_pk)
    ev = evidence_view(namespace, snapshot_pk)
    return (
        select(
            rv.c.pk.label("reflection_pk"),
            rv.c.id,
            rv.c.text,
            rv.c.evidence_count,
            ev.c.trajectory_pk,
            ev.c.step_start,
            ev.c.step_end,
        )
        .join(ev, ev.c.reflection_pk == rv.c.pk)
        .where(
            rv.c.kind == "heuristic",
            rv.c.status == "active",
            ev.c.trajectory_pk.in_(bindparam("pks", expanding=True)),
        )
        .order_by(rv.c.pk, ev.c.trajectory_pk, ev.c.step_start)
    )


def read_heuristic_evidence(
    session: Session, namespace: str, snapshot_pk: int | None, trajectory_pks: Sequence[int]
) -> list[RowMapping]:
    """Evidence rows citing these trajectories (at most MAX_IN) of the namespace's
    active heuristics: reflection_pk, id, text, evidence_count, trajectory_pk,
    step_start, step_end, in reflection and trajectory order."""
    if not trajectory_pks:
        return []
    assert len(trajectory_pks) <= MAX_IN, "the caller chunks"
    stmt = _heuristics_statement(namespace, snapshot_pk)
    return list(session.execute(stmt, {"pks": list(trajectory_pks)}).mappings())
