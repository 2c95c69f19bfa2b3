"""Jobs for operators: see the queue, retry what failed."""

from __future__ import annotations

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput
from service.auth import Permission, Principal
from service.jobs.schemas import JobPage, JobRead
from service.namespaces.service import NamespaceService
from service.pagination import keyset_page
from store import jobs as repo
from store.database import Database
from store.models import Job


def _job_id(raw: str) -> int:
    if not raw.isdigit():
        raise InvalidInput(f"job id {raw!r} is not a number", field="id", rule="job_id")
    return int(raw)


class JobService:
    def __init__(self, db: Database, namespaces: NamespaceService) -> None:
        self.db = db
        self.namespaces = namespaces

    def _get_or_404(self, session: Session, ns: str, id: str) -> Job:
        job_id = _job_id(id)
        return self.namespaces.get_or_404(session, ns, "job", id, lambda: repo.read_job(session, ns, job_id))

    def list(
        self, principal: Principal, ns: str, *, status: str | None, kind: str | None, cursor: str | None, limit: int
    ) -> JobPage:
        principal.require(Permission.JOBS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows, next_cursor = keyset_page(
                lambda before, n: repo.list_jobs(session, ns, status=status, kind=kind, before_id=before, limit=n),
                cursor=cursor,
                limit=limit,
                key=lambda j: j.id,
            )
            return JobPage(items=[JobRead.from_row(j) for j in rows], next_cursor=next_cursor)

    def get(self, principal: Principal, ns: str, id: str) -> JobRead:
        principal.require(Permission.JOBS_READ, ns)
        with self.db.read() as session:
            return JobRead.from_row(self._get_or_404(session, ns, id))

    def retry(self, principal: Principal, ns: str, id: str) -> JobRead:
        """A failed job goes back to the queue with a fresh attempt budget."""
        principal.require(Permission.JOBS_MANAGE, ns)

        def work(session: Session) -> JobRead:
            job = self._get_or_404(session, ns, id)
            if job.status != "failed":
                raise Conflict(
                    f"job {id} is {job.status}; only failed jobs are retried", field="id", rule="failed_only"
                )
            repo.retry_job(session, job)
            return JobRead.from_row(job)

        return self.db.run_write(work)
