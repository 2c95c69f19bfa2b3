"""The job queue table: enqueue (in the caller's transaction) and queue inspection.

A job is inserted in the same transaction as the data that triggers it, so work is
never lost between a commit and a send. The dedup key makes enqueueing idempotent:
the same work is never queued twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select, text, update
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import Job, Namespace, utcnow

# The predicate of the partial unique index on dedup_key (store/models.py), spelled
# the same so SQLite can match the conflict target to the index.
QUEUED = "status = 'queued'"
# Tries of a coalescing enqueue whose waiting job is claimed between its insert and its read.
CLAIMED_BETWEEN_RETRIES = 3


def create_job(
    session: Session,
    *,
    namespace: str,
    kind: str,
    payload: dict[str, Any],
    dedup_key: str,
    once: bool = True,
    priority: int = 100,
    max_attempts: int = 5,
) -> int:
    """Queue a job in the caller's transaction; returns its id.

    `once=True`: the work is done at most once ever; if any job with this key exists
    (whatever its status) its id is returned and nothing is queued. `once=False`
    (coalescing): nothing is queued while a job with this key is waiting; once it
    runs (it may already have read its inputs) the work can be queued again.
    """
    if once:
        existing = session.scalar(select(Job.id).where(Job.dedup_key == dedup_key).order_by(Job.id.desc()).limit(1))
        if existing is not None:
            return existing
    now = utcnow()
    values = {
        "namespace": namespace,
        "kind": kind,
        "payload": payload,
        "dedup_key": dedup_key,
        "priority": priority,
        "max_attempts": max_attempts,
        "status": "queued",
        "run_after": now,
        "created_at": now,
        "updated_at": now,
        "attempts": 0,
    }
    stmt = (
        dialect_insert(session)(Job)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["dedup_key"], index_where=text(QUEUED))
        .returning(Job.id)
    )
    for _ in range(CLAIMED_BETWEEN_RETRIES):
        job_id = session.scalar(stmt)
        if job_id is None:  # a job with this key is waiting: that one does the work
            job_id = session.scalar(select(Job.id).where(Job.dedup_key == dedup_key, Job.status == "queued"))
        if job_id is not None:
            return job_id
        # The waiting job was claimed between the two statements (PostgreSQL's read
        # committed gives each statement its own snapshot): it may have read its inputs
        # already, so the work is queued again, as after any claim.
    raise RuntimeError(f"job {dedup_key!r} neither queued nor found")  # claimed at every try: not expected


def count_jobs_by_status(session: Session) -> dict[tuple[str, str], int]:
    """(kind, status) -> count, for metrics and readiness."""
    rows = session.execute(select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status))
    return {(kind, status): n for kind, status, n in rows}


def claim_jobs(
    session: Session,
    *,
    worker_id: str,
    limit: int,
    lease_seconds: float,
    kinds: list[str] | None = None,
    starved_after: float | None = None,
    urgent_priority: int | None = None,
    namespace: str | None = None,
    max_priority: int | None = None,
) -> list[Job]:
    """Take up to `limit` runnable jobs (of `namespace` only, when given; of priority
    `max_priority` or better, when given): queued ones
    that are due, and running ones whose lease expired (their worker died). Each
    claim bumps `attempts`.

    Order: by priority, then age. With `starved_after` (seconds), jobs due for longer
    than that come first, oldest first: under a sustained stream of high-priority
    work (indexing), low-priority reflection would otherwise never run; jobs at
    `urgent_priority` or better (a reader is waiting on them) come before even those.

    PostgreSQL: `FOR UPDATE SKIP LOCKED`, so any number of workers claim without
    blocking each other or taking the same job. SQLite: the write unit's
    `BEGIN IMMEDIATE` already makes this the only writer.
    """
    now = utcnow()
    runnable = or_(
        and_(Job.status == "queued", Job.run_after <= now),
        and_(Job.status == "running", Job.lease_expires_at < now),
    )
    if starved_after is None:
        order: tuple[Any, ...] = (Job.priority, Job.id)
    else:
        starved = Job.run_after < now - timedelta(seconds=starved_after)
        urgent = Job.priority <= (urgent_priority if urgent_priority is not None else -1)
        order = (case((urgent, 0), (starved, 1), else_=2), case((starved, 0), else_=Job.priority), Job.id)
    # A frozen namespace's memory must not change: its jobs wait until it thaws.
    frozen = select(Namespace.name).where(Namespace.frozen.is_(True))
    stmt = select(Job).where(runnable, Job.namespace.not_in(frozen)).order_by(*order).limit(limit)
    if kinds:
        stmt = stmt.where(Job.kind.in_(kinds))
    if namespace is not None:
        stmt = stmt.where(Job.namespace == namespace)
    if max_priority is not None:
        stmt = stmt.where(Job.priority <= max_priority)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    jobs = list(session.scalars(stmt))
    lease = now + timedelta(seconds=lease_seconds)
    for job in jobs:
        job.status = "running"
        job.locked_by = worker_id
        job.lease_expires_at = lease
        job.attempts += 1
        job.updated_at = now
    session.flush()
    return jobs


def _owned(session: Session, job_id: int, worker_id: str) -> Job | None:
    """The job, locked, if this worker still holds its lease (fencing: a worker
    whose lease expired and was re-claimed must not write its results)."""
    stmt = select(Job).where(Job.id == job_id)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    job = session.scalars(stmt).one_or_none()
    if job is None or job.status != "running" or job.locked_by != worker_id:
        return None
    return job


def complete_job(session: Session, job_id: int, worker_id: str) -> bool:
    """Mark done in the caller's transaction (the one that writes the job's results),
    so results and completion commit together or not at all."""
    job = _owned(session, job_id, worker_id)
    if job is None:
        return False
    now = utcnow()
    job.status = "done"
    job.finished_at = now
    job.updated_at = now
    job.lease_expires_at = None
    job.last_error = None
    session.flush()
    return True


def fail_job(session: Session, job_id: int, worker_id: str, error: str, *, retry_in: float | None) -> bool:
    """Record an error: back to the queue after `retry_in` seconds while attempts
    remain (and the error is transient), else failed for good, error kept."""
    job = _owned(session, job_id, worker_id)
    if job is None:
        return False
    now = utcnow()
    job.last_error = error[:10_000]
    job.updated_at = now
    job.lease_expires_at = None
    job.locked_by = None
    if retry_in is not None and job.attempts < job.max_attempts:
        job.status = "queued"
        job.run_after = now + timedelta(seconds=retry_in)
    else:
        job.status = "failed"
        job.finished_at = now
    session.flush()
    return True


def retry_job(session: Session, job: Job) -> None:
    """Operator retry of a failed job: queued again with a fresh attempt budget."""
    if job.status == "failed":
        now = utcnow()
        job.status = "queued"
        job.attempts = 0
        job.run_after = now
        job.updated_at = now
        job.finished_at = None
        session.flush()


def read_job(session: Session, namespace: str, job_id: int) -> Job | None:
    job = session.get(Job, job_id)
    return job if job is not None and job.namespace == namespace else None


def list_jobs(
    session: Session,
    namespace: str,
    *,
    status: str | None,
    kind: str | None,
    before_id: int | None,
    limit: int,
) -> list[Job]:
    stmt = select(Job).where(Job.namespace == namespace)
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if kind is not None:
        stmt = stmt.where(Job.kind == kind)
    if before_id is not None:
        stmt = stmt.where(Job.id < before_id)
    return list(session.scalars(stmt.order_by(Job.id.desc()).limit(limit)))


def read_job_statuses(session: Session, namespace: str, kind: str, first_id: int, last_id: int) -> dict[str, int]:
    """Status -> count for the namespace's jobs of one kind in an id range (a write's
    consistency token names the range its jobs fell in)."""
    stmt = (
        select(Job.status, func.count())
        .where(Job.namespace == namespace, Job.kind == kind, Job.id >= first_id, Job.id <= last_id)
        .group_by(Job.status)
    )
    return {status: n for status, n in session.execute(stmt)}


def update_awaited_jobs(session: Session, namespace: str, kind: str, first_id: int, last_id: int, priority: int) -> int:
    """Move the namespace's queued jobs of one kind in an id range (what a reader's
    consistency token names) ahead of the queue: they get `priority` if it is
    better than theirs. Returns how many moved."""
    result = session.execute(
        update(Job)
        .where(
            Job.namespace == namespace,
            Job.kind == kind,
            Job.id >= first_id,
            Job.id <= last_id,
            Job.status == "queued",
            Job.priority > priority,
        )
        .values(priority=priority)
    )
    return result.rowcount or 0


def read_oldest_queued_age(session: Session) -> float | None:
    """Seconds the longest-waiting runnable job has waited (None: queue empty)."""
    oldest = session.scalar(select(func.min(Job.run_after)).where(Job.status == "queued", Job.run_after <= utcnow()))
    if oldest is None:
        return None
    if oldest.tzinfo is None:  # SQLite's MIN() bypasses the column type
        oldest = oldest.replace(tzinfo=UTC) if isinstance(oldest, datetime) else datetime.fromisoformat(oldest)
    return max(0.0, (utcnow() - oldest).total_seconds())
