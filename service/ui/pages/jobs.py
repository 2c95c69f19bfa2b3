"""Jobs: failed ones with their errors and a retry button; queue lag by kind."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from service.deps import ServicesDep
from service.params import Ns
from service.ui.params import Fields
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, read_form, redirect, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/jobs", include_in_schema=False)


@router.get("")
def jobs(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    kind = f.text("kind")
    page = services.jobs.list(
        session.principal,
        ns,
        status="failed",
        kind=kind,
        cursor=f.cursor(),
        limit=services.settings.ui.page_size,
    )
    queue = services.overview.queue(session.principal, ns)
    retried = f.text("retried", max_length=40)
    return render(
        request,
        "jobs.html",
        {
            "ns": ns,
            "page": page,
            "queue": queue,
            "params": f.given(("kind", "cursor")),
            "refresh": f.integer("refresh", minimum=5),
            "notice": f"Job {retried} is queued again." if retried and retried.isdigit() else None,
        },
    )


@router.post("/{id}/retry")
async def retry(request: Request, ns: Ns, id: str, session: UiSessionDep, services: ServicesDep) -> Response:
    await read_form(request, session)
    job = await run_in_threadpool(services.jobs.retry, session.principal, ns, id)
    return redirect(ns_url(ns, "jobs") + f"?retried={job.id}")
