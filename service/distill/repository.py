"""Reads behind teacher contexts and prefixes (service/distill): trajectories and
their steps, rollout-group members, earlier attempts and successes at a task
(through store.trajectory_reader), tasks' evidence cards and the evidence rows of
retrieved items, each through the snapshot views, so one query serves live reads
and reads pinned to a snapshot (`snapshot_pk` None = live).

Rows leave as plain frozen records: the caller closes its session before it
builds anything from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.hashing import task_hash as hash_task
from store import trajectory_reader as reader
from store.records import record_columns
from store.snapshots import evidence_view, reflection_view
from store.trajectory_reader import StepContent, TrajectoryFilter

# What a context shows of a step (read without its per-token arrays).
StepRecord = StepContent


@dataclass(frozen=True)
class TrajectoryRecord:
    pk: int
    id: str
    task: str
    task_hash: str
    group_id: str | None
    parent_trajectory_id: str | None
    attempt: int | None
    status: str
    success: bool | None
    reward: float | None
    failure_reason: str | None
    step_count: int
    created_at: datetime


@dataclass(frozen=True)
class Source:
    """One evidence row of a reflection: the trajectory it cites (id, rollout group,
    task) and the credit and value it carries (a merged exemplar's statistics are
    these rows' count, successes, failures and mean value)."""

    trajectory_id: str
    group_id: str | None
    task_hash: str
    success: bool | None = None
    value: float | None = None
    trajectory_pk: int | None = None
    step_start: int | None = None  # the step it cites (None: the whole trajectory)


@dataclass(frozen=True)
class CardRecord:
    id: str
    task: str
    text: str
    sources: tuple[Source, ...]


def list_group_members(
    session: Session, namespace: str, snapshot_pk: int | None, group_ids: Sequence[str]
) -> dict[str, list[str]]:
    """group id -> the ids of its trajectories, sorted."""
    out: dict[str, list[str]] = {g: [] for g in group_ids}
    if not group_ids:
        return out
    where = TrajectoryFilter(group_ids=tuple(group_ids))
    for row in reader.read_trajectories(session, namespace, snapshot_pk, where, columns=("group_id", "id")):
        out[row["group_id"]].append(row["id"])
    return {g: sorted(ids) for g, ids in out.items()}


def list_reflection_sources(
    session: Session, namespace: str, snapshot_pk: int | None, reflection_ids: Sequence[str]
) -> dict[str, list[Source]]:
    """reflection id -> every evidence row it has (all of them, not the newest few),
    in a fixed order (trajectory, first step), in one query."""
    out: dict[str, list[Source]] = {id_: [] for id_ in reflection_ids}
    if not reflection_ids:
        return out
    rv, ev = reflection_view(namespace, snapshot_pk), evidence_view(namespace, snapshot_pk)
    stmt = (
        select(
            rv.c.id,
            ev.c.trajectory_id,
            ev.c.group_id,
            ev.c.task_hash,
            ev.c.success,
            ev.c.value,
            ev.c.trajectory_pk,
            ev.c.step_start,
        )
        .join(ev, ev.c.reflection_pk == rv.c.pk)
        .where(rv.c.id.in_(sorted(set(reflection_ids))))
        .order_by(rv.c.id, ev.c.trajectory_id, ev.c.step_start.is_(None), ev.c.step_start)
    )
    for id_, trajectory_id, group_id, task_hash, success, value, trajectory_pk, step_start in session.execute(stmt):
        value = None if value is None else float(value)
        out[id_].append(Source(trajectory_id, group_id, task_hash, success, value, trajectory_pk, step_start))
    return out


def read_evidence_cards(
    session: Session, namespace: str, snapshot_pk: int | None, tasks: Sequence[str]
) -> dict[str, CardRecord | None]:
    """task -> its active evidence card (the newest if there were ever two) and the
    evidence rows it was built from (one per rollout); two queries for all tasks."""
    out: dict[str, CardRecord | None] = dict.fromkeys(tasks)
    if not tasks:
        return out
    rv = reflection_view(namespace, snapshot_pk)
    rows = session.execute(
        select(rv.c.id, rv.c.task, rv.c.text)
        .where(rv.c.kind == "evidence_card", rv.c.status == "active", rv.c.task.in_(sorted(set(tasks))))
        .order_by(rv.c.task, rv.c.updated_at.desc(), rv.c.pk.desc())
    ).all()
    newest: dict[str, Any] = {}
    for row in rows:
        newest.setdefault(row.task, row)
    sources = list_reflection_sources(session, namespace, snapshot_pk, [row.id for row in newest.values()])
    for task, row in newest.items():
        out[task] = CardRecord(id=row.id, task=task, text=row.text, sources=tuple(sources[row.id]))
    return out


def list_earlier_attempts(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    task_hash: str,
    *,
    before_pk: int | None,
    exclude_ids: Sequence[str],
    exclude_group_ids: Sequence[str],
    limit: int,
) -> list[TrajectoryRecord]:
    """Closed trajectories of the task stored before `before_pk` (None: any), without
    the excluded ids and groups, newest first."""
    where = TrajectoryFilter(
        task_hash=task_hash,
        status="closed",
        exclude_ids=tuple(sorted(set(exclude_ids))),
        exclude_group_ids=tuple(sorted(set(exclude_group_ids))),
    )
    return _newest_records(session, namespace, snapshot_pk, where, before_pk=before_pk, limit=limit)


def list_successes(
    session: Session, namespace: str, snapshot_pk: int | None, task: str, *, limit: int
) -> list[TrajectoryRecord]:
    """The task's closed successful trajectories (as the snapshot saw them), newest
    first, at most `limit`."""
    where = TrajectoryFilter(task_hash=hash_task(task), task=task, status="closed", success=True)
    return _newest_records(session, namespace, snapshot_pk, where, limit=limit)


def _newest_records(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    where: TrajectoryFilter,
    *,
    before_pk: int | None = None,
    limit: int,
) -> list[TrajectoryRecord]:
    """The trajectories matching `where` (stored before `before_pk`: None, any), newest first."""
    rows = reader.read_trajectories(
        session,
        namespace,
        snapshot_pk,
        where,
        columns=record_columns(TrajectoryRecord),
        before_pk=before_pk,
        newest_first=True,
        limit=limit,
    )
    return [TrajectoryRecord(**row) for row in rows]
