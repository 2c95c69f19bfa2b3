"""The job queue table: enqueue (in the caller's transaction) and queue inspection.

A job is inserted in the same transaction as the data that triggers it, so work is
never lost between a commit and a send. The dedup key makes enqueueing idempotent:
the same work is never queued twice.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from store.models import Job, utcnow


def enqueue_job(
    session: Session,
    *,
    namespace: str,
    kind: str,
    payload: dict[str, Any],
    dedup_key: str | None,
    priority: int = 100,
    max_attempts: int = 5,
) -> int | None:
    """Queue a job; returns its id, or the id of the job already queued under the
    same dedup key (None only if that job vanished concurrently)."""
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
    insert_fn = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = (
        insert_fn(Job).values(**values).on_conflict_do_nothing(index_elements=["dedup_key"]).returning(Job.id)
    )
    job_id = session.scalar(stmt)
    if job_id is None and dedup_key is not None:
        job_id = session.scalar(select(Job.id).where(Job.dedup_key == dedup_key))
    return job_id


def count_jobs_by_status(session: Session) -> dict[tuple[str, str], int]:
    """(kind, status) -> count, for metrics and readiness."""
    rows = session.execute(select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status))
    return {(kind, status): n for kind, status, n in rows}
