"""Sign in and out."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from domain.errors import Forbidden, Unauthorized
from service.deps import ServicesDep
from service.ui.web import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    UI_PREFIX,
    UiSessionDep,
    read_form,
    redirect,
    render,
    secure_cookie,
)

router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)


def _safe_next(target: str | None) -> str:
    """Only a path inside the UI (no open redirect to another site)."""
    if target and target.startswith(UI_PREFIX + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{UI_PREFIX}/namespaces"


def _login_page(request: Request, *, error: str | None = None, next: str | None = None, status: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(request, "login.html", {"login_csrf": token, "error": error, "next": next}, status_code=status)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=secure_cookie(request),
        path=f"{UI_PREFIX}/login",
        max_age=3600,
    )
    return response


@router.get("")
def ui_root() -> Response:
    return redirect(f"{UI_PREFIX}/namespaces")


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    return _login_page(request, next=next)


@router.post("/login")
async def login(request: Request, services: ServicesDep) -> Response:
    form = await read_form(request, None)
    try:
        cookie, _ = await run_in_threadpool(services.ui_sessions.sign_in, form.get("key", ""))
    except (Unauthorized, Forbidden) as exc:
        return _login_page(request, error=exc.message, next=form.get("next"), status=exc.status)
    response = redirect(_safe_next(form.get("next")))
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="lax",
        secure=secure_cookie(request),
        path=UI_PREFIX,
        max_age=int(services.settings.ui.session_hours * 3600),
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path=f"{UI_PREFIX}/login")
    return response


@router.post("/logout")
async def logout(request: Request, session: UiSessionDep, services: ServicesDep) -> Response:
    await read_form(request, session)
    await run_in_threadpool(services.ui_sessions.sign_out, session)
    response = redirect(f"{UI_PREFIX}/login")
    response.delete_cookie(SESSION_COOKIE, path=UI_PREFIX, httponly=True, samesite="lax", secure=secure_cookie(request))
    return response
