"""Puts the UI on the application: its pages, its static files, and HTML instead
of JSON for errors on its paths (its headers middleware is placed by app.py, with
the others)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.errors import ReflexaError
from service.ui.pages import (
    admin,
    auth,
    export,
    jobs,
    learning,
    overview,
    preview,
    reflections,
    retrievals,
    review,
    trajectories,
)
from service.ui.web import HERE, UI_PREFIX, SignInRequired, error_page, sign_in_redirect

PAGES = (auth, overview, learning, trajectories, export, reflections, review, jobs, retrievals, preview, admin)


def ui_reflexa_error(request: Request, exc: ReflexaError) -> Response:
    return error_page(request, exc.status, exc.message, exc.field, exc.rule)


def ui_validation_error(request: Request, exc: RequestValidationError) -> Response:
    err = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in err.get("loc", ()) if p not in ("path", "query", "body")]
    field = ".".join(loc) or "request"
    return error_page(request, 422, f"{field}: {err.get('msg', 'invalid')}", field, err.get("type", "invalid"))


def ui_http_error(request: Request, exc: StarletteHTTPException) -> Response:
    message = {404: "no such page", 405: "this page does not take that method"}.get(exc.status_code, str(exc.detail))
    return error_page(request, exc.status_code, message)


def ui_sign_in_required(request: Request, _: SignInRequired) -> Response:
    return sign_in_redirect(request)


def install_ui(app: FastAPI) -> None:
    for page in PAGES:
        app.include_router(page.router)
    app.mount(f"{UI_PREFIX}/static", StaticFiles(directory=str(HERE / "static")), name="ui-static")
    app.add_exception_handler(SignInRequired, ui_sign_in_required)  # type: ignore[arg-type]
