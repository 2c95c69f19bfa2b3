"""What every UI page shares: the signed-in session, forms with their CSRF check,
rendering with security headers, redirects, and HTML error pages."""

from __future__ import annotations

import hmac
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from domain.errors import Forbidden, InvalidInput, ReflexaError
from service.container import Services
from service.deps import get_services
from service.ui.content import as_text, content_columns, content_fields
from service.ui.sessions import UiSession

HERE = Path(__file__).parent
SESSION_COOKIE = "reflexa_session"
LOGIN_CSRF_COOKIE = "reflexa_login_csrf"
UI_PREFIX = "/ui"

templates = Jinja2Templates(directory=str(HERE / "templates"))
env = templates.env
env.trim_blocks = True
env.lstrip_blocks = True


def _ago(when: datetime | None) -> str:
    if when is None:
        return "—"
    seconds = (datetime.now(UTC) - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _when(when: datetime | None) -> Markup:
    if when is None:
        return Markup("—")
    iso = when.astimezone(UTC).isoformat(timespec="seconds")
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(iso, _ago(when))


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _qs(params: dict[str, Any] | None = None, **extra: Any) -> str:
    """A query string of the non-empty values (for links that keep the filters)."""
    merged = {**(params or {}), **extra}
    pairs = [(k, str(v)) for k, v in merged.items() if v is not None and v != ""]
    return ("?" + urlencode(pairs)) if pairs else ""


env.filters.update(
    ago=_ago,
    when=_when,
    pretty=_pretty,
    u=lambda value: quote(str(value), safe=""),
    pct=lambda value: "—" if value is None else f"{100 * value:.0f}%",
    num=lambda value: "—" if value is None else f"{value:,}",
    seconds=lambda value: "—" if value is None else f"{value:.1f} s",
    fixed=lambda value, digits=2: "—" if value is None else f"{value:.{digits}f}",
    short=lambda text, n=160: text if text is None or len(text) <= n else text[: n - 1] + "…",
)
env.globals.update(qs=_qs, content_fields=content_fields, content_columns=content_columns, as_text=as_text)


class SignInRequired(Exception):
    """No live session: the page redirects to the sign-in form (GET) or refuses (POST)."""


async def get_ui_session(request: Request, services: Annotated[Services, Depends(get_services)]) -> UiSession:
    found = await run_in_threadpool(services.ui_sessions.read, request.cookies.get(SESSION_COOKIE))
    if found is None:
        raise SignInRequired()
    request.state.ui_session = found
    return found


UiSessionDep = Annotated[UiSession, Depends(get_ui_session)]


def _same_origin(request: Request) -> bool:
    """A browser sends Origin with every POST; it must be this site (the CSRF token
    is the main defence, this a second one). No Origin (a non-browser client) passes."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc == host


async def read_form(request: Request, session: UiSession | None) -> dict[str, str]:
    """The url-encoded form, after the CSRF check (refused: 403, nothing changed).
    Text that no store can hold (NUL) is refused naming the field."""
    raw = await request.body()
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise InvalidInput("the form is not UTF-8", field="body", rule="utf8") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if "\x00" in value or "\x00" in name:
            raise InvalidInput(f"{name}: contains a NUL character", field=name, rule="no_nul")
        form.setdefault(name, value)
    if not _same_origin(request):
        raise Forbidden("this form was sent from another site", field="origin", rule="same_origin")
    expected_ok = (
        session.csrf_matches(form.get("csrf_token"))
        if session is not None
        else _login_token_ok(request, form.get("csrf_token"))
    )
    if not expected_ok:
        raise Forbidden(
            "the form's CSRF token is missing or wrong; reload the page and try again", field="csrf_token", rule="csrf"
        )
    return form


def _login_token_ok(request: Request, token: str | None) -> bool:
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE)
    return bool(cookie and token) and hmac.compare_digest(cookie.encode(), (token or "").encode())


def secure_cookie(request: Request) -> bool:
    return request.url.scheme == "https"


def render(
    request: Request, template: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> HTMLResponse:
    session: UiSession | None = getattr(request.state, "ui_session", None)
    ctx = {
        "request": request,
        "session": session,
        "principal": session.principal if session else None,
        "csrf_token": session.csrf_token if session else None,
        "path": request.url.path,
        **(context or {}),
    }
    return templates.TemplateResponse(request, template, ctx, status_code=status_code)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def ns_url(ns: str, *parts: str) -> str:
    return "/".join([f"{UI_PREFIX}/ns/{quote(ns, safe='')}", *(quote(p, safe="") for p in parts)])


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def error_page(
    request: Request, status: int, message: str, field: str | None = None, rule: str | None = None
) -> Response:
    if status == 401:
        return sign_in_redirect(request)
    return render(
        request,
        "error.html",
        {"status": status, "message": message, "field": field, "rule": rule},
        status_code=status,
    )


def reflexa_error_page(request: Request, exc: ReflexaError) -> Response:
    return error_page(request, exc.status, exc.message, exc.field, exc.rule)


def sign_in_redirect(request: Request) -> Response:
    if request.method != "GET":
        return render(
            request,
            "error.html",
            {"status": 401, "message": "your session has ended; sign in again", "field": None, "rule": "session"},
            status_code=401,
        )
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return redirect(f"{UI_PREFIX}/login{_qs(next=target)}")


# Pages are never cached (they show live data), never framed, and run only this
# site's script and style.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


class UiHeadersMiddleware:
    """Security headers on every /ui response (pure ASGI: the JSON API's hot path
    pays one string comparison)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ui(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(UI_PREFIX + "/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(SECURITY_HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
