"""The review queue: filtered by reason, kind and reflector; one decision at a time
from the keyboard or the buttons, or one decision on the selected rows."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from domain.errors import InvalidInput
from domain.reflections import KINDS
from service.auth import Permission
from service.deps import ServicesDep
from service.operator.review import DECISIONS, REASONS, ReviewFilters
from service.params import Ns, ReflectionId
from service.ui.params import MAX_TEXT, Fields
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, read_form, redirect, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/review", include_in_schema=False)

FILTERS = ("reason", "kind", "reflector")
NOTICES = {"approve": "Approved.", "retire": "Retired.", "keep": "Kept; it returns only after new outcomes."}


def _filters(f: Fields) -> ReviewFilters:
    return ReviewFilters(
        reason=f.choice("reason", REASONS), kind=f.choice("kind", KINDS), reflector=f.text("reflector")
    )


def _notice(f: Fields) -> str | None:
    decided, refused = f.integer("decided"), f.integer("refused")
    if decided is None:
        return NOTICES.get(f.values.get("done", ""))
    done = {"approve": "approved", "retire": "retired", "keep": "kept"}.get(f.values.get("done", ""), "decided")
    return f"{decided} {done}" + (f"; {refused} refused (their state does not allow it)." if refused else ".")


@router.get("")
def review(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    page = services.review.queue(
        session.principal,
        ns,
        filters=_filters(f),
        cursor=f.cursor(),
        limit=services.settings.ui.page_size,
    )
    focus = min(f.integer("focus") or 0, max(len(page.entries) - 1, 0))
    by_reason = page.counts_by("reason")
    return render(
        request,
        "review.html",
        {
            "ns": ns,
            "page": page,
            "focus": focus,
            "params": f.given((*FILTERS, "cursor")),
            "filters": f.given(FILTERS),
            "kinds": KINDS,
            "reasons": [(r, r.replace("_", " "), by_reason[r]) for r in REASONS],
            "reflectors": sorted(page.counts_by("reflector").items()),
            "refresh": f.integer("refresh", minimum=5),
            "utilities": services.inspect.utilities(ns, [e.reflection for e in page.entries]),
            "notice": _notice(f),
        },
    )


def _back(ns: str, f: Fields, **extra: object) -> Response:
    """Back to the same place in the same filtered queue: the decided items have
    left it, so the next one now sits where the first was."""
    params = {**f.given(FILTERS), "cursor": f.cursor(), "focus": f.integer("focus"), **extra}
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return redirect(ns_url(ns, "review") + (f"?{query}" if query else ""))


@router.post("")
async def decide_selected(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.REFLECTIONS_CURATE, ns)  # scope first: another namespace is a 404
    form = await read_form(request, session)
    f = Fields(form)
    decision = f.choice("decision", DECISIONS)
    # Checkboxes repeat the name `id` (read_form keeps a name's first value); the
    # CSRF check has passed on the same body.
    ids = [v for k, v in parse_qsl((await request.body()).decode("utf-8")) if k == "id" and v]
    if decision is None:
        raise InvalidInput("decision: choose approve, keep or retire", field="decision", rule="required")
    if not ids:
        raise InvalidInput("id: select at least one item (its checkbox, or x on it)", field="id", rule="required")
    result = await run_in_threadpool(
        lambda: services.review.decide_many(
            session.principal, ns, ids, decision, note=f.text("note", max_length=MAX_TEXT)
        )
    )
    return _back(ns, f, done=decision, decided=len(result.decided), refused=len(result.refused) or None)


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
    return _back(ns, f, done=decision)
