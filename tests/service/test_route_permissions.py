"""Every route, every role, and a key of another namespace: a table written by
hand (RULES) against the live route list. A new route without a rule fails here;
so does a route whose enforcement differs from its rule.

For each route and caller: no key -> 401; a role without the rule's permission ->
403; a key of another namespace on a namespaced route -> 404 naming `namespace`
(the same as a namespace that does not exist: existence never leaks); a role with
the permission -> past auth (any answer but 401, 403 and that 404; never a 5xx).
The UI's routes (not in the OpenAPI) are covered the same way from the app's
route list: UI_RULES."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Route

from service.app import create_app
from service.auth import ROLE_PERMISSIONS, Permission
from tests.conftest import ADMIN_KEY, make_settings
from tests.fixtures import create_namespace, post_trajectory
from tests.service.test_unstorable_input import BODIES, STEP
from tests.ui.ui_client import csrf_of, sign_in

P = Permission
PUBLIC = "public"  # no key needed (health, metrics; a reward capability URL is its own credential)
ANY_KEY = "any key"  # any valid key (scope still applies)

RULES: dict[str, str | Permission] = {
    "healthz": PUBLIC,
    "readyz": PUBLIC,
    "metrics": PUBLIC,
    "openrlhf_reward": PUBLIC,
    "list_keys": P.KEYS_MANAGE,
    "create_key": P.KEYS_MANAGE,
    "revoke_key": P.KEYS_MANAGE,
    "rotate_key": P.KEYS_MANAGE,
    "list_namespaces": ANY_KEY,
    "create_namespace": P.NAMESPACES_CREATE,
    "get_namespace": ANY_KEY,
    "create_trajectory": P.TRAJECTORIES_WRITE,
    "list_trajectories": P.TRAJECTORIES_READ,
    "create_trajectories_batch": P.TRAJECTORIES_WRITE,
    "get_trajectory": P.TRAJECTORIES_READ,
    "delete_trajectory": P.TRAJECTORIES_DELETE,
    "append_steps": P.TRAJECTORIES_WRITE,
    "close_trajectory": P.TRAJECTORIES_WRITE,
    "retrieve": P.RETRIEVE,
    "retrieve_batch": P.RETRIEVE,
    "report_retrieval_outcome": P.RETRIEVE,
    "check_action": P.RETRIEVE,
    "list_reflections": P.REFLECTIONS_READ,
    "get_reflection": P.REFLECTIONS_READ,
    "update_reflection": P.REFLECTIONS_CURATE,
    "reflection_history": P.REFLECTIONS_READ,
    "reflection_effect": P.REFLECTIONS_READ,
    "list_jobs": P.JOBS_READ,
    "get_job": P.JOBS_READ,
    "retry_job": P.JOBS_MANAGE,
    "create_snapshot": P.SNAPSHOTS,
    "list_snapshots": P.SNAPSHOTS,
    "get_snapshot": P.SNAPSHOTS,
    "delete_snapshot": P.SNAPSHOTS,
    "get_freeze": P.REFLECTIONS_READ,
    "freeze_namespace": P.FREEZE,
    "thaw_namespace": P.FREEZE,
    "distill_contexts": P.DISTILL,
    "distill_prefixes": P.DISTILL,
    "distill_advantages": P.DISTILL,
    "export_dataset": P.EXPORT,
    "list_tasks": P.TRAJECTORIES_READ,
    "create_rubric": P.REWARDS,
    "get_rubric": P.REFLECTIONS_READ,
    "score_rubric": P.REWARDS,
    "score_rubric_batch": P.REWARDS,
    "create_reward_capability": P.REWARDS,
    "list_reward_capabilities": P.REWARDS,
    "revoke_reward_capability": P.REWARDS,
    "distill_teacher_logprobs": P.DISTILL,
}
ROLES = tuple(ROLE_PERMISSIONS)
QUERIES = {"export_dataset": {"dataset": "trajectories"}}  # required query parameters
PATH_VALUES = {"ns": "proj", "id": "open", "retrieval_id": "r1", "capability_id": "cap_1", "capability": "rfxrw_x"}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(database_url, tmp_path)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as client:
        create_namespace(client, "proj")
        create_namespace(client, "elsewhere")
        post_trajectory(client, "proj", "open", steps=[STEP])
        yield client


def _keys(api: TestClient) -> dict[tuple[str, str], str]:
    """(role, namespace) -> a key of that role scoped to that namespace."""
    out = {}
    for role in ROLES:
        for ns in ("proj", "elsewhere"):
            r = api.post("/v1/keys", json={"role": role, "namespaces": [ns]})
            assert r.status_code == 201, r.text
            out[(role, ns)] = r.json()["key"]
    return out


def _allowed(role: str, rule: str | Permission) -> bool:
    return rule in (PUBLIC, ANY_KEY) or rule in ROLE_PERMISSIONS[role]


def test_every_route_has_a_rule(api: TestClient) -> None:
    ops = {op["operationId"] for ops in api.get("/openapi.json").json()["paths"].values() for op in ops.values()}
    assert ops == set(RULES), (
        f"routes without a rule: {sorted(ops - set(RULES))}; rules without a route: {sorted(set(RULES) - ops)}"
    )


def test_every_route_enforces_its_rule_for_every_role_and_scope(api: TestClient) -> None:
    keys = _keys(api)
    spec = api.get("/openapi.json").json()
    # Destructive routes go last, so the others see the fixtures they name.
    routes = sorted(
        ((method, template, op) for template, ops in spec["paths"].items() for method, op in ops.items()),
        key=lambda r: (r[0] == "delete", r[2]["operationId"] in ("revoke_key", "rotate_key", "freeze_namespace")),
    )
    checked = 0
    for method, template, op in routes:
        name, rule = op["operationId"], RULES[op["operationId"]]
        url = template.format(**{k: v for k, v in PATH_VALUES.items() if "{" + k + "}" in template})
        body = json.dumps(BODIES[name]) if "requestBody" in op else None
        namespaced = "{ns}" in template

        def call(
            key: str | None, method: str = method, url: str = url, body: str | None = body, name: str = name
        ) -> tuple[int, dict]:
            headers = {"Authorization": f"Bearer {key}" if key else "", "content-type": "application/json"}
            r = api.request(method.upper(), url, content=body, headers=headers, params=QUERIES.get(name))
            # 503 only for what this test leaves unconfigured (no teacher endpoint).
            assert r.status_code < 500 or "teacher_not_configured" in r.text, (name, r.status_code, r.text[:300])
            try:
                payload = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            except ValueError:
                payload = {}
            return r.status_code, payload.get("error", {}) if isinstance(payload, dict) else {}

        status, _ = call(None)
        if rule == PUBLIC:
            assert status != 401, (name, "public route asked for a key")
        else:
            assert status == 401, (name, "no key", status)
        for role in ROLES:
            status, error = call(keys[(role, "proj")])
            if _allowed(role, rule):
                assert status not in (401, 403), (name, role, status, error)
                assert not (status == 404 and error.get("field") == "namespace"), (name, role, error)
            else:
                assert status == 403 and error.get("rule") == "role", (name, role, status, error)
            if namespaced and rule != PUBLIC:
                status, error = call(keys[(role, "elsewhere")])
                assert status == 404 and error.get("field") == "namespace", (name, role, "other namespace", status)
            checked += 1
    assert checked == len(ROLES) * len(RULES)


# --- the operator UI --------------------------------------------------------------------

SESSION = "signed in"  # any signed-in operator or admin (scope applies)
ADMIN = "admin"  # signed in with a key that may manage keys / configure namespaces
SIGN_IN = "sign-in"  # the sign-in form itself and its target
UI_RULES: dict[tuple[str, str], str] = {
    ("GET", "/ui"): SIGN_IN,
    ("GET", "/ui/login"): SIGN_IN,
    ("POST", "/ui/login"): SIGN_IN,
    ("POST", "/ui/logout"): SESSION,
    ("GET", "/ui/namespaces"): SESSION,
    ("GET", "/ui/ns/{ns}"): SESSION,
    ("GET", "/ui/ns/{ns}/learning"): SESSION,
    ("GET", "/ui/ns/{ns}/export"): SESSION,
    ("GET", "/ui/ns/{ns}/trajectories"): SESSION,
    ("GET", "/ui/ns/{ns}/trajectories/{id}"): SESSION,
    ("GET", "/ui/ns/{ns}/reflections"): SESSION,
    ("GET", "/ui/ns/{ns}/reflections/bulk"): SESSION,
    ("POST", "/ui/ns/{ns}/reflections/bulk"): SESSION,
    ("GET", "/ui/ns/{ns}/reflections/{id}"): SESSION,
    ("POST", "/ui/ns/{ns}/reflections/{id}/status"): SESSION,
    ("POST", "/ui/ns/{ns}/reflections/{id}/edit"): SESSION,
    ("GET", "/ui/ns/{ns}/review"): SESSION,
    ("POST", "/ui/ns/{ns}/review"): SESSION,
    ("POST", "/ui/ns/{ns}/review/{id}"): SESSION,
    ("GET", "/ui/ns/{ns}/jobs"): SESSION,
    ("POST", "/ui/ns/{ns}/jobs/{id}/retry"): SESSION,
    ("GET", "/ui/ns/{ns}/retrievals"): SESSION,
    ("GET", "/ui/ns/{ns}/retrievals/{id}"): SESSION,
    ("GET", "/ui/ns/{ns}/preview"): SESSION,
    ("GET", "/ui/admin/keys"): ADMIN,
    ("POST", "/ui/admin/keys"): ADMIN,
    ("POST", "/ui/admin/keys/{id}/revoke"): ADMIN,
    ("POST", "/ui/admin/keys/{id}/rotate"): ADMIN,
    ("GET", "/ui/ns/{ns}/settings"): ADMIN,
    ("POST", "/ui/ns/{ns}/settings"): ADMIN,
}


def _all_routes(routes: list[Any]) -> Iterator[Route]:
    """The app's routes, looking into included routers (FastAPI keeps them nested;
    their routes' paths carry the prefix)."""
    for route in routes:
        nested = getattr(route, "original_router", None)
        if nested is not None:
            yield from _all_routes(nested.routes)
        elif isinstance(route, Route):
            yield route


def _ui_routes(api: TestClient) -> set[tuple[str, str]]:
    return {
        (method, route.path)
        for route in _all_routes(api.app.routes)  # type: ignore[attr-defined]
        if route.path.startswith("/ui") and route.methods
        for method in route.methods - {"HEAD"}
    }


def test_every_ui_route_has_a_rule_and_enforces_it(api: TestClient) -> None:
    routes = _ui_routes(api)
    assert routes == set(UI_RULES), f"without a rule: {sorted(routes - set(UI_RULES))}"
    operator = api.post("/v1/keys", json={"role": "operator", "namespaces": ["proj"]}).json()["key"]
    stranger = api.post("/v1/keys", json={"role": "operator", "namespaces": ["elsewhere"]}).json()["key"]
    anonymous = TestClient(api.app)
    signed = {}
    for name, key in (("operator", operator), ("stranger", stranger), ("admin", ADMIN_KEY)):
        web = TestClient(api.app)
        assert sign_in(web, key).status_code == 303
        signed[name] = web
    for (method, template), rule in sorted(UI_RULES.items()):
        if rule == SIGN_IN:
            continue
        url = template.format(ns="proj", id="open")
        r = anonymous.request(method, url, follow_redirects=False)
        if method == "GET":
            assert r.status_code == 303 and r.headers["location"].startswith("/ui/login"), (template, r.status_code)
        else:
            assert r.status_code == 401, (template, r.status_code)
        for who, web in signed.items():
            if method == "POST" and template == "/ui/logout":
                continue
            token = csrf_of(web.get("/ui/namespaces").text)
            r = web.request(
                method, url, data={"csrf_token": token} if method == "POST" else None, follow_redirects=False
            )
            assert r.status_code < 500, (template, who, r.status_code)
            if who == "stranger" and "{ns}" in template:
                assert r.status_code == 404, (template, who, r.status_code)
            elif rule == ADMIN and who != "admin":
                assert r.status_code == 403, (template, who, r.status_code)
            else:
                assert r.status_code not in (401, 403), (template, who, r.status_code)
