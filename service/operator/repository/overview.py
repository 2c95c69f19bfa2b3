"""Aggregates for the operator's namespace overview: trajectories and success per
day, reflections by kind and status, the queue by kind, retrieval volume and
latency. Each is one grouped query over an index led by the namespace."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from service.operator.repository.timestamps import as_utc, day_of
from store.models import (
    Job,
    Reflection,
    Retrieval,
    Trajectory,
    utcnow,
)


@dataclass(frozen=True)
class DayCount:
    day: str
    total: int
    successes: int  # trajectories: closed with success; retrievals: 0
    mean_latency_ms: float | None = None


def list_trajectories_by_day(
    session: Session, namespace: str, since: datetime, until: datetime | None = None
) -> list[DayCount]:
    """Trajectories created in [since, until) per UTC day, and how many succeeded."""
    day = day_of(session, Trajectory.created_at)
    window = [Trajectory.created_at >= since] + ([Trajectory.created_at < until] if until is not None else [])
    stmt = (
        select(day, func.count(), func.sum(case((Trajectory.success.is_(True), 1), else_=0)))
        .where(Trajectory.namespace == namespace, *window)
        .group_by(day)
        .order_by(day)
    )
    return [DayCount(d, n, int(s or 0)) for d, n, s in session.execute(stmt)]


def list_retrievals_by_day(
    session: Session, namespace: str, since: datetime, until: datetime | None = None
) -> list[DayCount]:
    """Retrievals logged in [since, until) per UTC day, and their mean server time."""
    day = day_of(session, Retrieval.created_at)
    window = [Retrieval.created_at >= since] + ([Retrieval.created_at < until] if until is not None else [])
    stmt = (
        select(day, func.count(), func.avg(Retrieval.latency_ms))
        .where(Retrieval.namespace == namespace, *window)
        .group_by(day)
        .order_by(day)
    )
    return [DayCount(d, n, 0, float(m) if m is not None else None) for d, n, m in session.execute(stmt)]


def list_recent_latencies(session: Session, namespace: str, limit: int) -> list[float]:
    """The server times of the namespace's newest `limit` retrievals (for p50/p95)."""
    stmt = (
        select(Retrieval.latency_ms)
        .where(Retrieval.namespace == namespace, Retrieval.latency_ms.is_not(None))
        .order_by(Retrieval.created_at.desc())
        .limit(limit)
    )
    return [float(v) for v in session.scalars(stmt)]


def count_reflections_by_kind_status(session: Session, namespace: str) -> dict[tuple[str, str], int]:
    stmt = (
        select(Reflection.kind, Reflection.status, func.count())
        .where(Reflection.namespace == namespace)
        .group_by(Reflection.kind, Reflection.status)
    )
    return {(k, s): n for k, s, n in session.execute(stmt)}


@dataclass(frozen=True)
class QueueRow:
    kind: str
    queued: int
    running: int
    failed: int
    oldest_queued_seconds: float | None  # how long the longest-waiting runnable job has waited


def list_queue_by_kind(session: Session, namespace: str) -> list[QueueRow]:
    """Per job kind: queued, running and failed counts and the age of the oldest
    runnable queued job (done jobs are not counted: the index leads with status)."""
    now = utcnow()
    runnable = (Job.status == "queued") & (Job.run_after <= now)
    stmt = (
        select(
            Job.kind,
            func.sum(case((Job.status == "queued", 1), else_=0)),
            func.sum(case((Job.status == "running", 1), else_=0)),
            func.sum(case((Job.status == "failed", 1), else_=0)),
            func.min(case((runnable, Job.run_after), else_=None)),
        )
        .where(Job.namespace == namespace, Job.status.in_(("queued", "running", "failed")))
        .group_by(Job.kind)
        .order_by(Job.kind)
    )
    out = []
    for kind, queued, running, failed, oldest in session.execute(stmt):
        at = as_utc(oldest)
        out.append(
            QueueRow(
                kind,
                int(queued or 0),
                int(running or 0),
                int(failed or 0),
                max(0.0, (now - at).total_seconds()) if at is not None else None,
            )
        )
    return out
