"""Bearer keys, roles and namespace isolation."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import step
from tests.fixtures import create_namespace, post_trajectory

STEP = step("o", "a")


def key(client: TestClient, role: str, namespaces: list[str]) -> dict[str, str]:
    r = client.post("/v1/keys", json={"role": role, "namespaces": namespaces})
    assert r.status_code == 201, r.text
    assert r.json()["key"].startswith("rfx_")
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.fixture
def two(client: TestClient) -> TestClient:
    for name in ("alpha", "beta"):
        create_namespace(client, name)
        post_trajectory(client, name, "t", steps=[STEP])
    return client


def test_missing_or_bad_credentials_are_401(two: TestClient) -> None:
    r = two.get("/v1/namespaces", headers={"Authorization": ""})
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert two.get("/v1/namespaces", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert two.get("/v1/namespaces", headers={"Authorization": f"Basic {ADMIN_KEY}"}).status_code == 401
    assert two.get("/healthz", headers={"Authorization": ""}).status_code == 200


def test_namespace_isolation(two: TestClient) -> None:
    a = key(two, "agent", ["alpha"])
    assert two.get("/v1/namespaces/alpha/trajectories/t", headers=a).status_code == 200
    # Neither read nor write reaches beta, and beta's existence does not leak.
    for method, path, body in [
        ("GET", "/v1/namespaces/beta/trajectories/t", None),
        ("GET", "/v1/namespaces/beta/trajectories", None),
        ("POST", "/v1/namespaces/beta/trajectories", {"task": "t"}),
        ("POST", "/v1/namespaces/beta/trajectories/batch", {"trajectories": [{"task": "t"}]}),
        ("POST", "/v1/namespaces/beta/trajectories/t/steps", {"steps": [STEP]}),
        ("POST", "/v1/namespaces/beta/trajectories/t/outcome", {"success": True}),
        ("DELETE", "/v1/namespaces/beta/trajectories/t", None),
    ]:
        r = two.request(method, path, json=body, headers=a)
        assert r.status_code == 404, (method, path, r.text)
        missing = two.request(method, path.replace("beta", "gamma"), json=body, headers=a)
        assert missing.status_code == 404 and missing.json()["error"]["type"] == r.json()["error"]["type"]
    assert [n["name"] for n in two.get("/v1/namespaces", headers=a).json()["items"]] == ["alpha"]
    assert two.get("/v1/namespaces/beta/trajectories/t").json()["step_count"] == 1


def test_roles(two: TestClient) -> None:
    agent = key(two, "agent", ["alpha"])
    operator = key(two, "operator", ["alpha"])
    trainer = key(two, "trainer", ["*"])
    # Only admins make keys and namespaces.
    for h in (agent, operator, trainer):
        assert two.post("/v1/keys", json={"role": "admin", "namespaces": ["*"]}, headers=h).status_code == 403
        assert two.post("/v1/namespaces", json={"name": "x"}, headers=h).status_code == 403
    # Operators read and curate but do not write experience; they may delete it.
    assert two.post("/v1/namespaces/alpha/trajectories", json={"task": "t"}, headers=operator).status_code == 403
    assert two.get("/v1/namespaces/alpha/trajectories", headers=operator).status_code == 200
    # Agents write but cannot delete.
    assert two.post("/v1/namespaces/alpha/trajectories", json={"task": "t"}, headers=agent).status_code == 201
    assert two.delete("/v1/namespaces/alpha/trajectories/t", headers=agent).status_code == 403
    assert two.delete("/v1/namespaces/alpha/trajectories/t", headers=operator).status_code == 200
    # A trainer scoped to every namespace bulk-ingests anywhere.
    r = two.post("/v1/namespaces/beta/trajectories/batch", json={"trajectories": [{"task": "t"}]}, headers=trainer)
    assert r.status_code == 201
    assert {n["name"] for n in two.get("/v1/namespaces", headers=trainer).json()["items"]} == {
        "alpha",
        "beta",
    }


def test_key_request_validation(two: TestClient) -> None:
    r = two.post("/v1/keys", json={"role": "root", "namespaces": ["alpha"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "role"
    r = two.post("/v1/keys", json={"role": "agent", "namespaces": ["Bad Name"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "namespaces[0]"
    r = two.post("/v1/keys", json={"role": "agent", "namespaces": []})
    assert r.status_code == 422 and r.json()["error"]["field"] == "namespaces"
    # A namespace that does not exist (a typo would make a key that sees nothing).
    r = two.post("/v1/keys", json={"role": "agent", "namespaces": ["alpha", "alpah"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "namespaces[1]"
    assert r.json()["error"]["rule"] == "namespace_exists"
    assert not [k for k in two.get("/v1/keys").json() if k["namespaces"] == ["alpah", "alpha"]]


def test_admin_key_generated_on_first_start_and_shown_once(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(database_url, tmp_path, admin_key=None)
    with TestClient(create_app(settings)):
        pass
    err = capsys.readouterr().err
    assert "admin key (shown once" in err
    secret = err.split("store it now): ")[1].split()[0]
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {secret}"}) as c:
        assert c.post("/v1/namespaces", json={"name": "n"}).status_code == 201
    assert "shown once" not in capsys.readouterr().err  # not generated again


def test_changing_env_admin_key_replaces_the_old_one(database_url: str, tmp_path: Path) -> None:
    for secret in ("first-secret", "second-secret"):
        with TestClient(create_app(make_settings(database_url, tmp_path, admin_key=secret))) as c:
            assert c.get("/v1/namespaces", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    with TestClient(create_app(make_settings(database_url, tmp_path, admin_key="second-secret"))) as c:
        assert c.get("/v1/namespaces", headers={"Authorization": "Bearer first-secret"}).status_code == 401
