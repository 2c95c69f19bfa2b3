"""The retrieval log: what was served for which state, and the outcome reported."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.deps import ServicesDep
from service.params import Ns, RetrievalId
from service.ui.pages.preview import preview_url
from service.ui.params import Fields
from service.ui.web import UI_PREFIX, UiSessionDep, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/retrievals", include_in_schema=False)


@router.get("")
def retrievals(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    page = services.inspect.retrievals(
        session.principal,
        ns,
        trajectory_id=f.text("trajectory_id", max_length=128),
        cursor=f.cursor(),
        limit=services.settings.ui.page_size,
    )
    return render(request, "retrievals.html", {"ns": ns, "page": page, "params": f.given(("trajectory_id", "cursor"))})


@router.get("/{id}")
def retrieval(request: Request, ns: Ns, id: RetrievalId, session: UiSessionDep, services: ServicesDep) -> Response:
    logged = services.inspect.retrieval(session.principal, ns, id)
    return render(request, "retrieval.html", {"ns": ns, "r": logged, "preview_url": preview_url(ns, logged.query)})
