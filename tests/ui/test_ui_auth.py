"""Who may use the operator UI, and what a signed-in operator can reach: roles at
sign-in, namespace isolation on every page (links typed by hand included), CSRF
on every form, the session cookie's flags, session end, expiry and revocation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store.models import Reflection, ReflectionVersion
from tests.conftest import ADMIN_KEY
from tests.ui.conftest import OTHER_MARKER, UiWorld, build_world
from tests.ui.ui_client import csrf_of, sign_in


def _state(world: UiWorld, id: str) -> tuple[str, int, int]:
    with world.db.read() as s:
        row = s.scalars(select(Reflection).where(Reflection.id == id)).one()
        versions = s.scalar(
            select(func.count()).select_from(ReflectionVersion).where(ReflectionVersion.reflection_pk == row.pk)
        )
        return row.status, row.version, int(versions or 0)


@pytest.mark.parametrize("role", ["agent", "trainer"])
def test_agent_and_trainer_keys_cannot_sign_in(world: UiWorld, role: str) -> None:
    key = world.key(role, ["mem"])
    web = world.web()
    r = sign_in(web, key)
    assert r.status_code == 403
    assert "cannot sign in" in r.text
    assert "reflexa_session" not in r.headers.get("set-cookie", "")
    assert web.get("/ui/ns/mem", follow_redirects=False).status_code == 303  # still signed out


def test_an_unknown_key_is_refused_and_the_form_says_why(world: UiWorld) -> None:
    r = sign_in(world.web(), "rfx_not-a-key")
    assert r.status_code == 401
    assert "unknown or revoked" in r.text
    assert "reflexa_session" not in r.headers.get("set-cookie", "")


def test_pages_without_a_session_redirect_to_sign_in_and_back(world: UiWorld) -> None:
    web = world.web()
    r = web.get("/ui/ns/mem/reflections?kind=exemplar", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ui/login?next=")
    login = web.get(r.headers["location"])
    token = csrf_of(login.text)
    r = web.post(
        "/ui/login",
        data={"key": ADMIN_KEY, "csrf_token": token, "next": "/ui/ns/mem/reflections?kind=exemplar"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui/ns/mem/reflections?kind=exemplar"


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/v1/keys", "/ui\\@evil"])
def test_sign_in_never_redirects_off_the_ui(world: UiWorld, target: str) -> None:
    web = world.web()
    token = csrf_of(web.get("/ui/login").text)
    r = web.post("/ui/login", data={"key": ADMIN_KEY, "csrf_token": token, "next": target}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/namespaces"


def test_an_operator_of_one_namespace_sees_nothing_of_another(world: UiWorld) -> None:
    web = world.web(world.key("operator", ["mem"]))
    listing = web.get("/ui/namespaces").text
    assert "/ui/ns/mem" in listing and "/ui/ns/other" not in listing
    with world.db.read() as s:
        other_reflection = s.scalar(select(Reflection.id).where(Reflection.namespace == "other").limit(1))
    other_traj = world.other.trajectories[0]
    r = world.api.post("/v1/namespaces/other/retrieve", json={"state": {"observation": "zebra"}, "render": {}})
    other_retrieval = r.json()["retrieval_id"]
    typed_by_hand = [
        "/ui/ns/other",
        "/ui/ns/other/learning",
        "/ui/ns/other/export?dataset=trajectories",
        "/ui/ns/other/trajectories",
        f"/ui/ns/other/trajectories/{other_traj}",
        "/ui/ns/other/reflections",
        "/ui/ns/other/reflections?q=kitchen",
        f"/ui/ns/other/reflections/{other_reflection}",
        "/ui/ns/other/reflections/bulk?action=retire",
        "/ui/ns/other/review",
        "/ui/ns/other/jobs",
        "/ui/ns/other/retrievals",
        f"/ui/ns/other/retrievals/{other_retrieval}",
        "/ui/ns/other/preview",
        "/ui/ns/other/preview?state=zebra-secret+kitchen",
        "/ui/ns/other/preview?state=kitchen&action=take+red+key",
        "/ui/ns/other/preview?state=kitchen&k=0",  # bad input is not looked at before the scope
        "/ui/ns/other/settings",
        # Another namespace's ids through this namespace's pages are not found either.
        f"/ui/ns/mem/trajectories/{other_traj}",
        f"/ui/ns/mem/reflections/{other_reflection}",
        f"/ui/ns/mem/retrievals/{other_retrieval}",
    ]
    for url in typed_by_hand:
        r = web.get(url)
        assert r.status_code == 404, (url, r.status_code)
        assert "not found" in r.text and OTHER_MARKER.strip() not in r.text, url
    # Forms aimed at the other namespace change nothing there.
    token = csrf_of(web.get("/ui/ns/mem").text)
    before = _state(world, other_reflection)
    r = web.post(
        f"/ui/ns/other/reflections/{other_reflection}/status",
        data={"csrf_token": token, "status": "retired"},
        follow_redirects=False,
    )
    assert r.status_code == 404
    r = web.post("/ui/ns/other/reflections/bulk", data={"csrf_token": token, "action": "retire", "confirm_count": "1"})
    assert r.status_code == 404
    r = web.post("/ui/ns/other/review", data={"csrf_token": token, "id": other_reflection, "decision": "retire"})
    assert r.status_code == 404
    # Its id among this namespace's selected rows is not found here: refused, not changed.
    r = web.post(
        "/ui/ns/mem/review",
        data={"csrf_token": token, "id": [other_reflection], "decision": "retire"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "decided=0&refused=1" in r.headers["location"]
    assert _state(world, other_reflection) == before


def test_operators_cannot_reach_the_admin_pages(world: UiWorld) -> None:
    web = world.web(world.key("operator", ["*"]))
    assert web.get("/ui/admin/keys").status_code == 403
    assert web.get("/ui/ns/mem/settings").status_code == 403
    page = web.get("/ui/ns/mem").text
    assert "/ui/admin/keys" not in page and "/ui/ns/mem/settings" not in page
    token = csrf_of(page)
    r = web.post("/ui/admin/keys", data={"csrf_token": token, "role": "admin", "namespaces": "*"})
    assert r.status_code == 403
    assert len(world.api.get("/v1/keys").json()) == 2  # the env admin key and this operator's


def test_forms_without_or_with_a_wrong_csrf_token_are_refused_and_change_nothing(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    target = world.review_ids[0]
    before = _state(world, target)
    forms = [
        (f"/ui/ns/mem/reflections/{target}/status", {"status": "retired"}),
        (f"/ui/ns/mem/reflections/{target}/edit", {"content": '{"observation": "x", "action": "y"}', "text": "x"}),
        (f"/ui/ns/mem/review/{target}", {"decision": "retire"}),
        ("/ui/ns/mem/review", {"decision": "retire", "id": target}),
        ("/ui/ns/mem/reflections/bulk", {"action": "retire", "confirm_count": "1000"}),
        (f"/ui/ns/mem/jobs/{world.failed_job_id}/retry", {}),
        ("/ui/admin/keys", {"role": "admin", "namespaces": "*"}),
        ("/ui/admin/keys/admin-env/rotate", {"grace_seconds": "0"}),
        ("/ui/ns/mem/settings", {"settings": '{"gamma": 0.5}'}),
        ("/ui/logout", {}),
    ]
    for action, data in forms:
        for token in (None, "wrong-token", csrf_of(world.web(ADMIN_KEY).get("/ui/namespaces").text)):
            body = dict(data) if token is None else {**data, "csrf_token": token}
            r = web.post(action, data=body, follow_redirects=False)
            assert r.status_code == 403, (action, token, r.status_code)
            assert "CSRF" in r.text
    assert _state(world, target) == before
    assert world.api.get("/v1/namespaces/mem/jobs/" + str(world.failed_job_id)).json()["status"] == "failed"
    assert len(world.api.get("/v1/keys").json()) == 1
    assert world.api.get("/v1/keys").json()[0]["expires_at"] is None  # not rotated
    assert world.api.get("/v1/namespaces/mem").json()["settings"]["gamma"] == 0.95
    assert web.get("/ui/namespaces").status_code == 200  # still signed in: the logout was refused too


def test_a_form_from_another_origin_is_refused(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    target = world.review_ids[0]
    token = csrf_of(web.get("/ui/namespaces").text)
    r = web.post(
        f"/ui/ns/mem/reflections/{target}/status",
        data={"csrf_token": token, "status": "retired"},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert _state(world, target)[0] != "retired"


def test_the_login_form_needs_its_own_token(world: UiWorld) -> None:
    web = world.web()
    web.get("/ui/login")
    r = web.post("/ui/login", data={"key": ADMIN_KEY, "csrf_token": "forged"}, follow_redirects=False)
    assert r.status_code == 403
    assert "reflexa_session" not in r.headers.get("set-cookie", "")


def test_session_cookie_flags_over_http_and_https(world: UiWorld) -> None:
    r = sign_in(world.web(), ADMIN_KEY)
    cookie = [c for c in r.headers.get_list("set-cookie") if c.startswith("reflexa_session=")][0].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "path=/ui" in cookie
    assert "secure" not in cookie  # plain http: a Secure cookie would never come back
    r = sign_in(world.web(base_url="https://testserver"), ADMIN_KEY)
    cookie = [c for c in r.headers.get_list("set-cookie") if c.startswith("reflexa_session=")][0].lower()
    assert "secure" in cookie and "httponly" in cookie


def test_pages_carry_security_headers_and_are_not_cached(world: UiWorld) -> None:
    r = world.web(ADMIN_KEY).get("/ui/ns/mem")
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"
    assert "cache-control" not in world.api.get("/healthz").headers  # the JSON API is untouched


def test_signing_out_ends_the_session_for_good(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    cookie = web.cookies.get("reflexa_session")
    token = csrf_of(web.get("/ui/namespaces").text)
    r = web.post("/ui/logout", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    # The old cookie, replayed by hand, no longer opens anything.
    replay = world.web()
    replay.cookies.set("reflexa_session", cookie, path="/ui")
    assert replay.get("/ui/namespaces", follow_redirects=False).status_code == 303


def test_revoking_a_key_ends_its_sessions(world: UiWorld) -> None:
    key = world.key("operator", ["mem"])
    web = world.web(key)
    assert web.get("/ui/ns/mem").status_code == 200
    key_id = [k for k in world.api.get("/v1/keys").json() if k["role"] == "operator"][0]["id"]
    assert world.api.delete(f"/v1/keys/{key_id}").status_code == 200
    assert web.get("/ui/ns/mem", follow_redirects=False).status_code == 303
    assert sign_in(world.web(), key).status_code == 401


def test_sessions_expire(database_url: str, tmp_path: Path) -> None:
    for world in build_world(database_url, tmp_path, session_hours=1 / 3600):  # one second
        web = world.web(ADMIN_KEY)
        assert web.get("/ui/namespaces").status_code == 200
        time.sleep(1.2)
        assert web.get("/ui/namespaces", follow_redirects=False).status_code == 303
