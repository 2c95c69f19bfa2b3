"""The reads behind dataset exports (GET …/export), keyset-batched.

Every read goes through store.snapshots' views, so one query serves live and
pinned data: trajectories from `trajectory_view`, their steps joined by
`steps_of(view)` (only the steps that existed at the snapshot), reflections and
their evidence from `reflection_view` / `evidence_view`. Each function is one
bounded statement the caller runs in a short read unit of its own; none holds a
transaction across a stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, bindparam, case, func, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import Session
from sqlalchemy.sql import Subquery

from store.models import Step
from store.snapshots import TRAJECTORY_VIEW_COLUMNS, evidence_view, reflection_view, steps_of, trajectory_view

# What the export reads of a trajectory view (all its columns but the namespace).
TRAJECTORY_FIELDS = tuple(c for c in TRAJECTORY_VIEW_COLUMNS if c != "namespace")
STEP_FIELDS = (
    "trajectory_pk",
    "index",
    "observation",
    "state_data",
    "internal_state",
    "action",
    "result",
    "error",
    "reward",
    "done",
    "truncated",
    "caused_failure",
)
# Most values in one IN (…) list: well under SQLite's and PostgreSQL's bind limits.
MAX_IN = 500


@dataclass(frozen=True)
class ExportFilters:
    """Which trajectories an export reads; every field given must match."""

    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    task: str | None = None
    task_hash: str | None = None  # with `task` (the index leads by it); alone, every task of that hash
    success: bool | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    status: str | None = None
    with_outcome: bool = False  # success is known (true or false)
    with_parent: bool = False  # names parent_trajectory_id (a retry)


def _filtered(view: Subquery, filters: ExportFilters) -> Select[Any]:
    v = view.c
    stmt = select(*(v[name] for name in TRAJECTORY_FIELDS))
    f = filters
    for column, value in (
        (v.environment, f.environment),
        (v.agent, f.agent),
        (v.policy_version, f.policy_version),
        (v.group_id, f.group_id),
        (v.task_hash, f.task_hash),
        (v.task, f.task),
        (v.success, f.success),
        (v.status, f.status),
    ):
        if value is not None:
            stmt = stmt.where(column == value)
    if f.created_after is not None:
        stmt = stmt.where(v.created_at >= f.created_after)
    if f.created_before is not None:
        stmt = stmt.where(v.created_at < f.created_before)
    if f.with_outcome:
        stmt = stmt.where(v.success.is_not(None))
    if f.with_parent:
        stmt = stmt.where(v.parent_trajectory_id.is_not(None))
    return stmt


# Statements are built once per (namespace, snapshot, filters) and run batch after
# batch with new parameters: building one is most of a small read's cost, and the
# garbage of a new statement per batch (reference cycles, freed only by the cyclic
# collector) outgrew the batch itself: 3.3 MB against 0.9 MB at the peak of a
# 24 MB export (tests/service/test_export.py). Those keyed by filters are fewer:
# a filter may be a long task text.


@lru_cache(maxsize=32)
def _batch_statement(namespace: str, snapshot_pk: int | None, filters: ExportFilters, limit: int) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    return _filtered(view, filters).where(view.c.pk > bindparam("after_pk")).order_by(view.c.pk).limit(limit)


def read_trajectory_batch(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    filters: ExportFilters,
    *,
    after_pk: int | None,
    limit: int,
) -> list[RowMapping]:
    """Up to `limit` matching trajectories after `after_pk`, in pk order (the keyset:
    stable under inserts, and the order every export is written in)."""
    stmt = _batch_statement(namespace, snapshot_pk, filters, limit)
    return list(session.execute(stmt, {"after_pk": 0 if after_pk is None else after_pk}).mappings())


@lru_cache(maxsize=128)
def _by_ids_statement(namespace: str, snapshot_pk: int | None) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    columns = (view.c[name] for name in TRAJECTORY_FIELDS)
    return select(*columns).where(view.c.id.in_(bindparam("ids", expanding=True)))


def read_trajectories_by_ids(
    session: Session, namespace: str, snapshot_pk: int | None, ids: Sequence[str]
) -> dict[str, RowMapping]:
    """The trajectories with these ids (at most MAX_IN), whatever their fields."""
    if not ids:
        return {}
    assert len(ids) <= MAX_IN, "the caller chunks"
    stmt = _by_ids_statement(namespace, snapshot_pk)
    return {row["id"]: row for row in session.execute(stmt, {"ids": list(ids)}).mappings()}


@lru_cache(maxsize=128)
def _steps_statement(namespace: str, snapshot_pk: int | None) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    return (
        select(*(getattr(Step, name) for name in STEP_FIELDS))
        .join(view, steps_of(view))
        .where(view.c.pk.in_(bindparam("pks", expanding=True)))
        .order_by(Step.trajectory_pk, Step.index)
    )


def read_steps(
    session: Session, namespace: str, snapshot_pk: int | None, trajectory_pks: Sequence[int]
) -> dict[int, list[RowMapping]]:
    """The steps of these trajectories (at most MAX_IN) that exist in the view, by
    trajectory and in index order."""
    out: dict[int, list[RowMapping]] = {pk: [] for pk in trajectory_pks}
    if not trajectory_pks:
        return out
    assert len(trajectory_pks) <= MAX_IN, "the caller chunks"
    stmt = _steps_statement(namespace, snapshot_pk)
    for row in session.execute(stmt, {"pks": list(trajectory_pks)}).mappings():
        out[row["trajectory_pk"]].append(row)
    return out


@lru_cache(maxsize=32)
def _tasks_statement(namespace: str, snapshot_pk: int | None, filters: ExportFilters, limit: int) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    inner = _filtered(view, filters).where(view.c.status == "closed", view.c.success.is_not(None)).subquery("m")
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
    filters: ExportFilters,
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
