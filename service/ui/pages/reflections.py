"""Reflections: filters, search by state text, a reflection's page, and its
curation (approve, retire, restore, edit) one at a time or in bulk."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from domain.errors import Conflict, InvalidInput
from domain.reflections import KINDS, STATUSES
from service.auth import Permission
from service.deps import ServicesDep
from service.operator.bulk import is_unfiltered
from service.operator.inspect import StaleEdit
from service.operator.learning import thin
from service.params import Ns, ReflectionId
from service.reflections.schemas import ReflectionUpdate
from service.ui import charts
from service.ui.params import MAX_TEXT, Fields, validated
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, read_form, redirect, render
from store.reflections import SORTS, ReflectionFilters

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/reflections", include_in_schema=False)

FILTERS = ("kind", "status", "environment", "reflector", "utility_min", "utility_max")
SORT_LABELS = {
    "newest": "newest",
    "utility": "utility, best first",
    "utility_low": "utility, worst first",
    "uses": "uses",
}
NOTICES = {
    "approve": "Approved.",
    "retire": "Retired: it no longer appears in retrieval results.",
    "restore": "Restored.",
    "edit": "Saved as a new version.",
}


def _filters(f: Fields, baseline: float) -> ReflectionFilters:
    return ReflectionFilters(
        kind=f.choice("kind", KINDS),
        status=f.choice("status", STATUSES),
        environment=f.text("environment"),
        reflector=f.text("reflector"),
        utility_min=f.number("utility_min"),
        utility_max=f.number("utility_max"),
        baseline=baseline,
    )


@router.get("")
def reflections(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    filters = _filters(f, services.inspect.baseline(ns) if session.principal.can_see(ns) else 0.5)
    params = f.given((*FILTERS, "sort", "q", "cursor"))
    sort = f.choice("sort", ("newest", *SORTS))
    context = {
        "ns": ns,
        "params": params,
        "kinds": KINDS,
        "statuses": STATUSES,
        "sorts": SORT_LABELS,
        "search": None,
    }
    query = f.text("q", max_length=MAX_TEXT)
    if query is not None:
        statuses = [filters.status] if filters.status else list(STATUSES)
        context["search"] = services.inspect.search(
            session.principal, ns, query, kind=filters.kind, statuses=statuses, environment=filters.environment
        )
        context["search_statuses"] = statuses
    else:
        cursor = f.cursor()
        page = services.reflections.list(
            session.principal,
            ns,
            filters,
            cursor=cursor,
            limit=services.settings.ui.page_size,
            sort=None if sort in (None, "newest") else sort,
        )
        context["page"] = page
        context["utilities"] = services.inspect.utilities(ns, page.items)
    return render(request, "reflections.html", context)


@router.get("/bulk")
def bulk_confirm(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    action = f.choice("action", ("retire", "approve")) or "retire"
    filters = _filters(f, services.inspect.baseline(ns) if session.principal.can_see(ns) else 0.5)
    return render(request, "bulk_confirm.html", _bulk_context(ns, action, filters, f, session, services))


def _bulk_context(
    ns: str, action: str, filters: ReflectionFilters, f: Fields, session: UiSessionDep, services: ServicesDep
) -> dict[str, object]:
    """The confirmation: the count, the filters, the first few items the action changes."""
    return {
        "ns": ns,
        "action": action,
        "count": services.bulk.count(session.principal, ns, filters, action),
        "preview": services.bulk.preview(session.principal, ns, filters, action),
        "unfiltered": is_unfiltered(filters),
        "filters": list(f.given(FILTERS).items()),
    }


@router.post("/bulk")
async def bulk_apply(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.REFLECTIONS_CURATE, ns)  # scope first: another namespace is a 404
    form = await read_form(request, session)
    f = Fields(form)
    action = f.choice("action", ("retire", "approve")) or "retire"
    confirmed = f.integer("confirm_count")
    if confirmed is None:
        raise InvalidInput(
            "confirm_count: confirm the number of reflections first", field="confirm_count", rule="required"
        )
    baseline = await run_in_threadpool(services.inspect.baseline, ns) if session.principal.can_see(ns) else 0.5
    filters = _filters(f, baseline)
    try:
        result = await run_in_threadpool(
            services.bulk.apply,
            session.principal,
            ns,
            filters,
            action,
            confirmed_count=confirmed,
            note=f.text("note", max_length=MAX_TEXT),
            everything=f.boolean("everything") is True,
        )
    except Conflict as exc:
        if exc.rule != "count_changed":
            raise
        context = await run_in_threadpool(_bulk_context, ns, action, filters, f, session, services)
        return render(
            request, "bulk_confirm.html", {**context, "notice": f"The set changed: {exc.message}."}, status_code=409
        )
    done = "retired" if action == "retire" else "approved"
    return render(
        request,
        "bulk_done.html",
        {"ns": ns, "result": result, "done": done, "filters": list(f.given(FILTERS).items())},
    )


@router.get("/{id}")
def reflection(request: Request, ns: Ns, id: ReflectionId, session: UiSessionDep, services: ServicesDep) -> Response:
    return _reflection_page(request, ns, id, session, services)


def _reflection_page(
    request: Request,
    ns: str,
    id: str,
    session: UiSessionDep,
    services: ServicesDep,
    *,
    edit_error: str | None = None,
    edit_text: str | None = None,
    edit_content: str | None = None,
    stale: StaleEdit | None = None,
    status_code: int = 200,
) -> Response:
    d = services.inspect.reflection(session.principal, ns, id)
    labels = [day.day[5:] for day in d.served_by_day]
    chart = charts.stacked_bars(
        "Times served per day, by the outcome reported",
        labels,
        [
            ("success", [day.successes for day in d.served_by_day]),
            ("failure", [day.failures for day in d.served_by_day]),
            ("no outcome", [day.served - day.successes - day.failures for day in d.served_by_day]),
        ],
    )
    credits = services.learning.utility_over_time(session.principal, ns, id)
    utility_points = thin(credits)
    utility_chart = charts.lines(
        "Posterior utility after each credited outcome",
        [str(p.credit) for p in utility_points],
        [
            ("posterior mean", [p.utility.mean for p in utility_points]),
            ("mean − 1 s.d.", [p.utility.mean - p.utility.std for p in utility_points]),
            ("mean + 1 s.d.", [p.utility.mean + p.utility.std for p in utility_points]),
        ],
        percent=True,
        references=[("namespace baseline", d.utility.baseline)],
        x_label="credited outcomes, oldest first",
        y_label="utility",
    )
    notice = NOTICES.get(request.query_params.get("done", ""))
    return render(
        request,
        "reflection.html",
        {
            "ns": ns,
            "r": d.reflection,
            "d": d,
            "u": d.utility,
            "served_chart": chart,
            "utility_points": utility_points,
            "utility_credits": len(credits),
            "utility_chart": utility_chart,
            "notice": notice,
            "edit_error": edit_error,
            "edit_text": edit_text,
            "edit_content": edit_content,
            "stale": stale,
        },
        status_code=status_code,
    )


@router.post("/{id}/status")
async def change_status(
    request: Request, ns: Ns, id: ReflectionId, session: UiSessionDep, services: ServicesDep
) -> Response:
    session.principal.require(Permission.REFLECTIONS_CURATE, ns)
    form = await read_form(request, session)
    f = Fields(form)
    status = f.choice("status", STATUSES)
    if status is None:
        raise InvalidInput("status: choose approve, retire or restore", field="status", rule="required")
    before = await run_in_threadpool(services.reflections.get, session.principal, ns, id)
    body = validated(
        ReflectionUpdate,
        status=status,
        note=f.text("note", max_length=MAX_TEXT),
        expected_version=f.integer("expected_version", minimum=1),
    )
    await run_in_threadpool(services.reflections.update, session.principal, ns, id, body)
    done = "retire" if status == "retired" else ("approve" if before.status == "candidate" else "restore")
    return redirect(ns_url(ns, "reflections", id) + f"?done={done}")


@router.post("/{id}/edit")
async def edit(request: Request, ns: Ns, id: ReflectionId, session: UiSessionDep, services: ServicesDep) -> Response:
    form = await read_form(request, session)
    f = Fields(form)
    raw_content = form.get("content", "")
    text = f.text("text", max_length=services.settings.limits.max_text_chars)

    def refused(message: str, status_code: int = 422, stale: StaleEdit | None = None) -> Response:
        # The page again, with what was typed kept and the reason shown.
        return _reflection_page(
            request,
            ns,
            id,
            session,
            services,
            edit_error=message,
            edit_text=text,
            edit_content=raw_content,
            stale=stale,
            status_code=status_code,
        )

    try:
        content = json.loads(raw_content)
        if not isinstance(content, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        return await run_in_threadpool(refused, f"content: not a JSON object ({exc})")
    body = validated(
        ReflectionUpdate,
        content=content,
        text=text,
        note=f.text("note", max_length=MAX_TEXT),
        expected_version=f.integer("expected_version", minimum=1),
    )
    try:
        await run_in_threadpool(services.reflections.update, session.principal, ns, id, body)
    except InvalidInput as exc:
        return await run_in_threadpool(refused, exc.message)
    except Conflict as exc:
        if exc.rule != "version_match" or body.expected_version is None:
            raise
        base, message = body.expected_version, exc.message

        def stale() -> Response:
            # The current version with the form as typed, what changed in between and
            # what the edit would change now; the form now expects the current version,
            # so sending it again saves it over that one.
            diff = services.inspect.stale_edit(session.principal, ns, id, base, content, text)
            return refused(message, 409, diff)

        return await run_in_threadpool(stale)
    return redirect(ns_url(ns, "reflections", id) + "?done=edit")
