"""/v1/namespaces/{ns}/jobs (operators)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.jobs.schemas import JobPage, JobRead, JobStatus
from service.params import Ns

router = APIRouter(prefix="/v1/namespaces/{ns}/jobs", tags=["jobs"])


@router.get("", response_model=JobPage, operation_id="list_jobs")
def list_jobs(
    ns: Ns,
    principal: PrincipalDep,
    services: ServicesDep,
    limit: PageLimit,
    status: JobStatus | None = None,
    kind: str | None = None,
    cursor: str | None = None,
) -> JobPage:
    """Newest first; failed jobs keep their last error."""
    return services.jobs.list(principal, ns, status=status, kind=kind, cursor=cursor, limit=limit)


@router.get("/{id}", response_model=JobRead, operation_id="get_job")
def get_job(ns: Ns, id: str, principal: PrincipalDep, services: ServicesDep) -> JobRead:
    return services.jobs.get(principal, ns, id)


@router.post("/{id}/retry", response_model=JobRead, operation_id="retry_job")
def retry_job(ns: Ns, id: str, principal: PrincipalDep, services: ServicesDep) -> JobRead:
    """Queue a failed job again (409 for one that is not failed)."""
    return services.jobs.retry(principal, ns, id)
