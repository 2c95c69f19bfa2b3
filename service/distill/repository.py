"""Reads behind teacher contexts (service/distill): trajectories and their steps,
rollout-group members, a task's evidence card, earlier attempts at a task and the
sources of retrieved items, each through the snapshot views, so one query serves
live reads and reads pinned to a snapshot (`snapshot_pk` None = live).

Rows leave as plain frozen records: the caller closes its session before it
builds anything from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from store.models import Step
from store.snapshots import evidence_view, reflection_view, steps_of, trajectory_view


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


def _record(row: Any) -> TrajectoryRecord:
    return TrajectoryRecord(
        pk=row.pk,
        id=row.id,
        task=row.task,
        task_hash=row.task_hash,
        group_id=row.group_id,
        parent_trajectory_id=row.parent_trajectory_id,
        attempt=row.attempt,
        status=row.status,
        success=row.success,
        reward=row.reward,
        failure_reason=row.failure_reason,
        step_count=row.step_count,
        created_at=row.created_at,
    )


def read_trajectories(
    session: Session, namespace: str, snapshot_pk: int | None, ids: Sequence[str]
) -> dict[str, TrajectoryRecord]:
    """id -> the trajectory as the view holds it (absent: unknown, or created after the snapshot)."""
    if not ids:
        return {}
    tv = trajectory_view(namespace, snapshot_pk)
    rows = session.execute(select(tv).where(tv.c.id.in_(sorted(set(ids)))))
    return {row.id: _record(row) for row in rows}


def list_steps(
    session: Session, namespace: str, snapshot_pk: int | None, trajectory_pks: Sequence[int]
) -> dict[int, list[StepRecord]]:
    """trajectory pk -> its steps in order (under a snapshot, only those that existed then)."""
    out: dict[int, list[StepRecord]] = {pk: [] for pk in trajectory_pks}
    if not trajectory_pks:
        return out
    tv = trajectory_view(namespace, snapshot_pk)
    stmt = (
        select(Step)
        .join(tv, steps_of(tv))
        .where(tv.c.pk.in_(sorted(set(trajectory_pks))))
        .order_by(Step.trajectory_pk, Step.index)
    )
    for s in session.scalars(stmt):
        out[s.trajectory_pk].append(
            StepRecord(
                index=s.index,
                observation=s.observation,
                state_data=s.state_data,
                internal_state=s.internal_state,
                action=s.action,
                result=s.result,
                error=s.error,
                reward=s.reward,
                done=s.done,
                truncated=s.truncated,
                caused_failure=s.caused_failure,
            )
        )
    return out


def list_group_members(
    session: Session, namespace: str, snapshot_pk: int | None, group_ids: Sequence[str]
) -> dict[str, list[str]]:
    """group id -> the ids of its trajectories, sorted."""
    out: dict[str, list[str]] = {g: [] for g in group_ids}
    if not group_ids:
        return out
    tv = trajectory_view(namespace, snapshot_pk)
    stmt = select(tv.c.group_id, tv.c.id).where(tv.c.group_id.in_(sorted(set(group_ids)))).order_by(tv.c.id)
    for group_id, id_ in session.execute(stmt):
        out[group_id].append(id_)
    return out


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
    tv = trajectory_view(namespace, snapshot_pk)
    stmt = select(tv).where(tv.c.task_hash == task_hash, tv.c.status == "closed")
    if before_pk is not None:
        stmt = stmt.where(tv.c.pk < before_pk)
    if exclude_ids:
        stmt = stmt.where(tv.c.id.not_in(sorted(set(exclude_ids))))
    if exclude_group_ids:
        stmt = stmt.where(or_(tv.c.group_id.is_(None), tv.c.group_id.not_in(sorted(set(exclude_group_ids)))))
    rows = session.execute(stmt.order_by(tv.c.pk.desc()).limit(limit))
    return [_record(row) for row in rows]
