"""Reads behind teacher contexts and prefixes (service/distill): trajectories and
their steps, rollout-group members, earlier attempts and successes at a task
(through store.trajectory_reader), a task's evidence card and the sources of retrieved items, each through the
snapshot views, so one query serves live reads and reads pinned to a snapshot
(`snapshot_pk` None = live).

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
from store.snapshots import evidence_view, reflection_view
from store.trajectory_reader import TrajectoryFilter


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
class StepRecord:
    index: int
    observation: str
    state_data: Any
    internal_state: str | None
    action: Any
    result: str | None
    error: str | None
    reward: float | None
    done: bool
    truncated: bool
    caused_failure: bool


@dataclass(frozen=True)
class Source:
    """One trajectory a reflection cites: its id, rollout group and task."""

    trajectory_id: str
    group_id: str | None
    task_hash: str


@dataclass(frozen=True)
class CardRecord:
    id: str
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
    """reflection id -> every trajectory it cites (all of them, not the newest few)."""
    out: dict[str, list[Source]] = {id_: [] for id_ in reflection_ids}
    if not reflection_ids:
        return out
    rv, ev = reflection_view(namespace, snapshot_pk), evidence_view(namespace, snapshot_pk)
    stmt = (
        select(rv.c.id, ev.c.trajectory_id, ev.c.group_id, ev.c.task_hash)
        .join(ev, ev.c.reflection_pk == rv.c.pk)
        .where(rv.c.id.in_(sorted(set(reflection_ids))))
        .order_by(rv.c.id, ev.c.trajectory_id)
    )
    for id_, trajectory_id, group_id, task_hash in session.execute(stmt):
        out[id_].append(Source(trajectory_id, group_id, task_hash))
    return out


def read_evidence_card(session: Session, namespace: str, snapshot_pk: int | None, task: str) -> CardRecord | None:
    """The task's active evidence card (the newest if there were ever two) and the
    trajectories it was built from."""
    rv = reflection_view(namespace, snapshot_pk)
    row = session.execute(
        select(rv.c.id, rv.c.text)
        .where(rv.c.kind == "evidence_card", rv.c.status == "active", rv.c.task == task)
        .order_by(rv.c.updated_at.desc(), rv.c.pk.desc())
        .limit(1)
    ).one_or_none()
    if row is None:
        return None
    sources = list_reflection_sources(session, namespace, snapshot_pk, [row.id])[row.id]
    return CardRecord(id=row.id, text=row.text, sources=tuple(sources))


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
    rows = reader.read_trajectories(
        session,
        namespace,
        snapshot_pk,
        where,
        columns=reader.record_columns(TrajectoryRecord),
        before_pk=before_pk,
        newest_first=True,
        limit=limit,
    )
    return [TrajectoryRecord(**row) for row in rows]


def list_successes(
    session: Session, namespace: str, snapshot_pk: int | None, task: str, *, limit: int
) -> list[TrajectoryRecord]:
    """The task's closed successful trajectories (as the snapshot saw them), newest
    first, at most `limit`."""
    where = TrajectoryFilter(task_hash=hash_task(task), task=task, status="closed", success=True)
    rows = reader.read_trajectories(
        session,
        namespace,
        snapshot_pk,
        where,
        columns=reader.record_columns(TrajectoryRecord),
        newest_first=True,
        limit=limit,
    )
    return [TrajectoryRecord(**row) for row in rows]
