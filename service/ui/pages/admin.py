"""Admin only: API keys (create, with the secret shown once; revoke) and a
namespace's settings."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from domain.errors import InvalidInput
from service.auth import Permission
from service.deps import ServicesDep
from service.keys.schemas import KeyCreate, KeyRotate
from service.params import Ns
from service.ui.params import Fields, validated
from service.ui.web import UI_PREFIX, UiSessionDep, ns_url, read_form, redirect, render

router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)
ROLES = ("operator", "agent", "trainer", "admin")


def _keys_page(request: Request, session: UiSessionDep, services: ServicesDep, **extra: object) -> Response:
    keys = services.keys.list(session.principal)
    status = 422 if extra.get("error") else 201 if extra.get("created") else 200
    return render(request, "keys.html", {"keys": keys, "roles": ROLES, **extra}, status_code=status)


@router.get("/admin/keys")
def keys(request: Request, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.KEYS_MANAGE)
    return _keys_page(request, session, services)


@router.post("/admin/keys")
async def create_key(request: Request, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.KEYS_MANAGE)
    f = Fields(await read_form(request, session))
    namespaces = [n.strip() for n in (f.text("namespaces", max_length=2000) or "").split(",") if n.strip()]
    try:
        body = validated(
            KeyCreate, role=f.choice("role", ROLES), namespaces=namespaces, description=f.text("description")
        )
        created = await run_in_threadpool(services.keys.create, session.principal, body)
    except InvalidInput as exc:
        message = exc.message
        return await run_in_threadpool(lambda: _keys_page(request, session, services, error=message))
    # The secret is in this response only: never in a redirect URL or a log.
    return await run_in_threadpool(lambda: _keys_page(request, session, services, created=created))


@router.post("/admin/keys/{id}/rotate")
async def rotate_key(request: Request, id: str, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.KEYS_MANAGE)
    f = Fields(await read_form(request, session))
    grace = f.integer("grace_seconds")
    body = validated(KeyRotate, **({} if grace is None else {"grace_seconds": grace}))
    created = await run_in_threadpool(services.keys.rotate, session.principal, id, body)
    # As on creation, the new secret is in this response only.
    return await run_in_threadpool(lambda: _keys_page(request, session, services, created=created, rotated=id))


@router.post("/admin/keys/{id}/revoke")
async def revoke_key(request: Request, id: str, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.KEYS_MANAGE)
    await read_form(request, session)
    await run_in_threadpool(services.keys.revoke, session.principal, id)
    return redirect(f"{UI_PREFIX}/admin/keys")


def _settings_page(
    request: Request,
    ns: str,
    session: UiSessionDep,
    services: ServicesDep,
    *,
    text: str,
    status_code: int = 200,
    **extra: object,
) -> Response:
    f = Fields(request.query_params)
    changes, next_cursor = services.namespaces.setting_history(
        session.principal, ns, cursor=f.cursor(), limit=services.settings.ui.page_size
    )
    context = {"ns": ns, "text": text, "changes": changes, "next_cursor": next_cursor, "params": f.given(("cursor",))}
    return render(request, "settings.html", {**context, **extra}, status_code=status_code)


@router.get("/ns/{ns}/settings")
def settings(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    current = services.namespaces.settings(session.principal, ns)
    notice = "Settings saved." if request.query_params.get("done") == "saved" else None
    return _settings_page(
        request, ns, session, services, text=json.dumps(current, indent=2, sort_keys=True), notice=notice
    )


@router.post("/ns/{ns}/settings")
async def save_settings(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.NAMESPACES_CONFIGURE, ns)  # before reading what was sent
    form = await read_form(request, session)
    raw = form.get("settings", "")
    try:
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"settings: not JSON ({exc})", field="settings", rule="json") from None
        await run_in_threadpool(services.namespaces.update_settings, session.principal, ns, value)
    except InvalidInput as exc:
        message = exc.message
        return await run_in_threadpool(
            lambda: _settings_page(request, ns, session, services, text=raw, error=message, status_code=422)
        )
    return redirect(ns_url(ns, "settings") + "?done=saved")
