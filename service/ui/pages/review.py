"""The review queue: one decision at a time, from the keyboard or the buttons."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from service.deps import ServicesDep
from service.operator.review import DECISIONS
from service.params import Ns, ReflectionId
from service.ui.params import MAX_TEXT, Fields
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, read_form, redirect, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/review", include_in_schema=False)

NOTICES = {"approve": "Approved.", "retire": "Retired.", "keep": "Kept; it returns only after new outcomes."}


@router.get("")
def review(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    page = services.review.queue(
        session.principal, ns, cursor=f.text("cursor", max_length=400), limit=services.settings.ui.page_size
    )
    focus = min(f.integer("focus") or 0, max(len(page.entries) - 1, 0))
    return render(
        request,
        "review.html",
        {
            "ns": ns,
            "page": page,
            "focus": focus,
            "params": f.given(("cursor",)),
            "refresh": f.integer("refresh", minimum=5),
            "utilities": services.inspect.utilities(ns, [e.reflection for e in page.entries]),
            "notice": NOTICES.get(request.query_params.get("done", "")),
        },
    )


@router.post("/{id}")
async def decide(request: Request, ns: Ns, id: ReflectionId, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(await read_form(request, session))
    decision = f.choice("decision", DECISIONS) or ""
    await run_in_threadpool(
        lambda: services.review.decide(
            session.principal,
            ns,
            id,
            decision,
            note=f.text("note", max_length=MAX_TEXT),
            expected_version=f.integer("expected_version", minimum=1),
        )
    )
    # Back to the same place: the decided item has left the queue, so the next one
    # now sits where it was.
    params = {"cursor": f.text("cursor", max_length=400), "focus": f.integer("focus"), "done": decision}
    query = "&".join(f"{k}={v}" for k, v in params.items() if v not in (None, ""))
    return redirect(ns_url(ns, "review") + (f"?{query}" if query else ""))
