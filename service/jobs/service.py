"""Jobs for operators: see the queue, retry what failed."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.auth import Permission, Principal
from service.errors import Conflict, InvalidInput, NotFound
from service.jobs.schemas import JobRead
from service.namespaces.service import NamespaceService
from service.pagination import decode_cursor, encode_cursor
from store import jobs as repo
from store.database import Database
from store.models import Job


def _read(job: Job) -> JobRead:
    return JobRead(
        id=str(job.id),
        kind=job.kind,
        status=job.status,  # type: ignore[arg-type]
        payload=job.payload,
        priority=job.priority,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        last_error=job.last_error,
        locked_by=job.locked_by,
        run_after=job.run_after,
        lease_expires_at=job.lease_expires_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
    )


def _job_id(raw: str) -> int:
    if not raw.isdigit():
        raise InvalidInput(f"job id {raw!r} is not a number", field="id", rule="job_id")
    return int(raw)


class JobService:
    def __init__(self, db: Database, namespaces: NamespaceService) -> None:
        self.db = db
        self.namespaces = namespaces

    def list(
        self, principal: Principal, ns: str, *, status: str | None, kind: str | None, cursor: str | None, limit: int
    ) -> tuple[list[JobRead], str | None]:
        principal.require(Permission.JOBS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows = repo.list_jobs(
                session, ns, status=status, kind=kind, before_id=decode_cursor(cursor), limit=limit + 1
            )
            items = [_read(j) for j in rows[:limit]]
        return items, (encode_cursor(rows[limit - 1].id) if len(rows) > limit else None)

    def get(self, principal: Principal, ns: str, id: str) -> JobRead:
        principal.require(Permission.JOBS_READ, ns)
        with self.db.read() as session:
            return _read(self._get_or_404(session, ns, id))

    def retry(self, principal: Principal, ns: str, id: str) -> JobRead:
        """A failed job goes back to the queue with a fresh attempt budget."""
        principal.require(Permission.JOBS_MANAGE, ns)
        with self.db.write() as session:
            job = self._get_or_404(session, ns, id)
            if job.status != "failed":
                raise Conflict(
                    f"job {id} is {job.status}; only failed jobs are retried", field="id", rule="failed_only"
                )
            job = repo.retry_job(session, ns, job.id)
            return _read(job)  # type: ignore[arg-type]

    def _get_or_404(self, session: Session, ns: str, id: str) -> Job:
        self.namespaces.require(session, ns)
        job = repo.get_job(session, _job_id(id))
        if job is None or job.namespace != ns:
            raise NotFound(f"job {id} not found in namespace {ns!r}", field="id")
        return job
