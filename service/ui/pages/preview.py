"""What would the agent get: a state in, the items and the context block a
`POST …/retrieve` with `render` would serve for it, and with an action the
pre-action check; through the real services, not logged (service/operator/preview.py)."""

from __future__ import annotations

import json
from typing import Any, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from domain.errors import InvalidInput
from domain.reflections import KINDS
from service.check.schemas import CheckRequest
from service.deps import ServicesDep
from service.params import Ns
from service.retrieval.schemas import RenderOptions, RetrieveRequest
from service.ui.params import MAX_TEXT, Fields, validated
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/preview", include_in_schema=False)

TEXTS = ("state", "internal_state", "task", "environment", "action")
FORMATS: tuple[str, ...] = get_args(RenderOptions.model_fields["format"].annotation)
DEFAULT_K = RetrieveRequest.model_fields["k"].default
DEFAULT_MAX_CHARS = RenderOptions.model_fields["max_chars"].default
# The request's field paths, as the form names them (errors name the form's field).
FORM_FIELDS = {"state.observation": "state", "render.max_chars": "max_chars", "render.format": "format"}


def preview_url(ns: str, query: dict[str, Any]) -> str | None:
    """This page for a logged retrieval's query (its state asked again, now); None
    when the state is longer than the form takes."""
    asked = query.get("state") or {}
    if asked.get("data") is not None:  # a structured state: the form takes text only
        return None
    state = asked.get("observation") or ""
    if not state.strip() or len(state) > MAX_TEXT:
        return None
    render_options = query.get("render") or {}
    pairs: list[tuple[str, Any]] = [("state", state)]
    pairs += [(name, query[name]) for name in ("internal_state", "task", "environment", "k") if query.get(name)]
    pairs += [("kinds", kind) for kind in query.get("kinds") or []]
    pairs += [(name, render_options[name]) for name in ("format", "max_chars") if render_options.get(name)]
    return ns_url(ns, "preview") + "?" + urlencode(pairs)


def _action(text: str) -> str | dict[str, Any]:
    """A tool call is typed as a JSON object; anything else is the action's text."""
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, dict):
            return value
    return text


def _typed(f: Fields, name: str) -> str | None:
    """A text as typed, not trimmed: the state's exact text decides exact matches. Only
    line breaks are undone: browsers send a textarea's as CRLF, agents send LF."""
    if f.text(name, max_length=MAX_TEXT) is None:  # (the empty, NUL and length checks)
        return None
    return f.values[name].replace("\r\n", "\n")


def _requests(f: Fields, kinds: list[str]) -> tuple[RetrieveRequest, CheckRequest | None]:
    texts = {name: f.text(name, max_length=MAX_TEXT) for name in ("task", "environment", "action")}
    texts.update(state=_typed(f, "state"), internal_state=_typed(f, "internal_state"))
    if texts["state"] is None:
        raise InvalidInput("state: enter the state the agent observes", field="state", rule="required")
    for kind in kinds:
        if kind not in KINDS:
            raise InvalidInput(f"kinds: {kind!r} is not one of {', '.join(KINDS)}", field="kinds", rule="enum")
    k = f.integer("k")
    max_chars = f.integer("max_chars")
    # What the retrieve and the check are asked about: the same state, plan, task and environment.
    about = {
        "state": {"observation": texts["state"]},
        "internal_state": texts["internal_state"],
        "task": texts["task"],
        "environment": texts["environment"],
    }
    request = validated(
        RetrieveRequest,
        **about,
        kinds=kinds or list(KINDS),
        k=DEFAULT_K if k is None else k,
        render={
            "format": f.choice("format", FORMATS) or "markdown",
            "max_chars": DEFAULT_MAX_CHARS if max_chars is None else max_chars,
        },
    )
    if texts["action"] is None:
        return request, None
    check = validated(CheckRequest, **about, action=_action(texts["action"]))
    return request, check


@router.get("")
def preview(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    kinds = [k for k in request.query_params.getlist("kinds") if k]
    context: dict[str, Any] = {
        "ns": ns,
        "params": f.given((*TEXTS, "k", "format", "max_chars")),
        "chosen_kinds": kinds,
        "kinds": KINDS,
        "formats": FORMATS,
        "default_k": DEFAULT_K,
        "default_max_chars": DEFAULT_MAX_CHARS,
        "check_k": CheckRequest.model_fields["k"].default,
        "check_min_similarity": CheckRequest.model_fields["min_similarity"].default,
        "result": None,
        "error": None,
    }
    if "state" not in request.query_params:  # the empty form
        services.preview.require(session.principal, ns)
        return render(request, "preview.html", context)
    try:
        retrieve, check = _requests(f, kinds)
        context["retrieve"] = retrieve
        context["result"] = services.preview.preview(session.principal, ns, retrieve, check)
    except InvalidInput as exc:
        # The form again, what was typed kept, the reason next to it. Scope first:
        # another namespace is a 404 whatever the input.
        services.preview.require(session.principal, ns)
        field = FORM_FIELDS.get(exc.field or "", exc.field)
        message = exc.message if field == exc.field else exc.message.replace(exc.field or "", field or "", 1)
        context["error"] = {"field": field, "message": message, "rule": exc.rule}
        return render(request, "preview.html", context, status_code=exc.status)
    return render(request, "preview.html", context)
