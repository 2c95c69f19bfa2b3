"""Reads behind rubric scoring (the rubric and the trajectories scored, live or
through a snapshot's views, so one query serves both) and the reward capability
rows. Creating a rubric is store.reflections.create_reflection (a rubric is a
reflection of kind `rubric`).

Rows leave as plain frozen records: the caller closes its session before scoring
(which may wait on an LLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import RewardCapability, utcnow
from store.records import record_from
from store.snapshots import reflection_view

RUBRIC_KIND = "rubric"


@dataclass(frozen=True)
class RubricRecord:
    pk: int
    id: str
    status: str
    version: int
    content: dict[str, Any]
    text: str
    task: str | None
    environment: str | None
    reflector: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class TrajectoryRecord:
    pk: int
    id: str
    task: str
    metadata: dict[str, Any] | None
    step_count: int


@dataclass(frozen=True)
class StepRecord:
    index: int
    observation: str
    action: Any
    result: str | None
    metadata: dict[str, Any] | None


def read_rubric(session: Session, namespace: str, snapshot_pk: int | None, id: str) -> RubricRecord | None:
    """The rubric as it is (snapshot_pk None) or as the snapshot pinned it; None when
    there is no reflection of kind rubric with this id."""
    rv = reflection_view(namespace, snapshot_pk)
    row = session.execute(select(rv).where(rv.c.id == id, rv.c.kind == RUBRIC_KIND)).one_or_none()
    if row is None:
        return None
    return record_from(RubricRecord, row)


# -- reward capabilities -----------------------------------------------------------


def create_capability(
    session: Session,
    *,
    id: str,
    namespace: str,
    rubric_id: str,
    secret_hash: str,
    note: str | None,
    created_by: str | None,
) -> RewardCapability:
    row = RewardCapability(
        id=id,
        namespace=namespace,
        rubric_id=rubric_id,
        secret_hash=secret_hash,
        note=note,
        created_by=created_by,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def read_active_capability(session: Session, secret_hash: str) -> RewardCapability | None:
    """The capability with this secret hash, unless revoked."""
    stmt = select(RewardCapability).where(
        RewardCapability.secret_hash == secret_hash, RewardCapability.revoked_at.is_(None)
    )
    return session.scalars(stmt).one_or_none()


def read_capability(
    session: Session, namespace: str, rubric_id: str, id: str, *, for_update: bool = False
) -> RewardCapability | None:
    stmt = select(RewardCapability).where(
        RewardCapability.namespace == namespace, RewardCapability.rubric_id == rubric_id, RewardCapability.id == id
    )
    if for_update:
        stmt = stmt.with_for_update()
    return session.scalars(stmt).one_or_none()


def list_capabilities(
    session: Session, namespace: str, rubric_id: str, before_pk: int | None, limit: int
) -> list[RewardCapability]:
    """Newest first, keyset-paginated; revoked ones included."""
    stmt = select(RewardCapability).where(
        RewardCapability.namespace == namespace, RewardCapability.rubric_id == rubric_id
    )
    if before_pk is not None:
        stmt = stmt.where(RewardCapability.pk < before_pk)
    return list(session.scalars(stmt.order_by(RewardCapability.pk.desc()).limit(limit)))


def update_capability_revoked(session: Session, row: RewardCapability, when: datetime) -> None:
    row.revoked_at = when
    session.flush()
