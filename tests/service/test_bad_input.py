"""Every malformed or oversized request gets a 4xx in one error shape naming the
field and the rule, and leaves the store exactly as it was."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.settings import Limits, Settings
from store.database import Database
from store.models import Job, Step, Trajectory
from tests.conftest import admin_api, make_settings
from tests.factories import step
from tests.fixtures import create_namespace, post_trajectory

NS = "/v1/namespaces/proj"
OK_STEP = step("o", "a")


def counts(url: str) -> tuple[int, int, int]:
    db = Database(url)
    with db.read() as s:
        out = tuple(s.scalar(select(func.count()).select_from(m)) or 0 for m in (Trajectory, Step, Job))
    db.dispose()
    return out  # type: ignore[return-value]


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "proj")
    post_trajectory(client, "proj", "open", steps=[OK_STEP])
    post_trajectory(client, "proj", "closed", success=True)
    return client


def deep(n: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(n):
        node = {"k": node}
    return node


CASES: list[tuple[str, str, Any, int, str, str]] = [
    # (name, path, body, status, field, rule)
    ("missing task", "/trajectories", {"steps": []}, 422, "task", "missing"),
    ("empty task", "/trajectories", {"task": ""}, 422, "task", "string_too_short"),
    ("wrong type", "/trajectories", {"task": 5}, 422, "task", "string_type"),
    (
        "bool for float",
        "/trajectories",
        {"task": "t", "steps": [{**OK_STEP, "reward": "1.0"}]},
        422,
        "steps[0].reward",
        "float_type",
    ),
    ("unknown field", "/trajectories", {"task": "t", "colour": "red"}, 422, "colour", "extra_forbidden"),
    (
        "unknown nested field",
        "/trajectories",
        {"task": "t", "steps": [{**OK_STEP, "obs": "x"}]},
        422,
        "steps[0].obs",
        "extra_forbidden",
    ),
    ("id with a slash", "/trajectories", {"id": "a/b", "task": "t"}, 422, "id", "string_pattern_mismatch"),
    ("id too long", "/trajectories", {"id": "a" * 129, "task": "t"}, 422, "id", "string_pattern_mismatch"),
    (
        "negative index",
        "/trajectories/open/steps",
        {"steps": [{**OK_STEP, "index": -1}]},
        422,
        "steps[0].index",
        "greater_than_equal",
    ),
    ("no steps", "/trajectories/open/steps", {"steps": []}, 422, "steps", "too_short"),
    ("append to closed", "/trajectories/closed/steps", {"steps": [OK_STEP]}, 409, "steps", "trajectory_open"),
    ("NUL in text", "/trajectories", {"task": "t\x00x"}, 422, "task", "valid_unicode"),
    (
        "lone surrogate",
        "/trajectories",
        {"task": "t", "steps": [{**OK_STEP, "result": "\ud800"}]},
        422,
        "steps[0].result",
        "valid_unicode",
    ),
    (
        "NUL in JSON key",
        "/trajectories",
        {"task": "t", "metadata": {"a\x00": 1}},
        422,
        "metadata.a\x00",
        "valid_unicode",
    ),
    ("too deep", "/trajectories", {"task": "t", "metadata": deep(40)}, 422, None, "max_json_depth"),
    (
        "metadata too big",
        "/trajectories",
        {"task": "t", "metadata": {"x": "y" * 300_000}},
        422,
        "metadata",
        "max_json_bytes",
    ),
    (
        "state data not an object",
        "/trajectories",
        {"task": "t", "steps": [{"state": {"observation": "o", "data": [1]}, "action": "a"}]},
        422,
        "steps[0].state.data",
        "dict_type",
    ),
    ("batch empty", "/trajectories/batch", {"trajectories": []}, 422, "trajectories", "too_short"),
    ("outcome wrong type", "/trajectories/open/outcome", {"success": "yes"}, 422, "success", "bool_type"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request_named_and_store_unchanged(api: TestClient, settings: Settings, case: tuple) -> None:
    _, path, body, status, field, rule = case
    before = counts(settings.resolved_database_url)
    # stdlib json, not the client's encoder: it sends NULs and lone surrogates as escapes.
    r = api.post(NS + path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"type", "message"}
    if field is not None:
        assert err["field"] == field
    if rule is not None:
        assert err["rule"] == rule
    assert counts(settings.resolved_database_url) == before


def test_ten_megabyte_observation_names_the_field(api: TestClient, settings: Settings) -> None:
    before = counts(settings.resolved_database_url)
    big = {"task": "t", "steps": [OK_STEP, {"state": {"observation": "x" * 10_000_000}, "action": "a"}]}
    r = api.post(f"{NS}/trajectories", json=big)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "steps[1].state.observation"
    assert r.json()["error"]["rule"] == "max_text_chars"
    assert counts(settings.resolved_database_url) == before


def test_hundred_thousand_steps_in_one_call(api: TestClient, settings: Settings) -> None:
    before = counts(settings.resolved_database_url)
    r = api.post(f"{NS}/trajectories/open/steps", json={"steps": [OK_STEP] * 100_000})
    assert r.status_code == 422
    assert r.json()["error"] | {"message": ""} == {
        "type": "invalid_input",
        "field": "steps",
        "rule": "max_steps_per_request",
        "message": "",
    }
    assert counts(settings.resolved_database_url) == before


def test_invalid_utf8_and_invalid_json(api: TestClient) -> None:
    r = api.post(f"{NS}/trajectories", content=b'{"task": "\xff\xfe"}', headers={"content-type": "application/json"})
    assert r.status_code in (400, 422) and r.json()["error"]["field"] == "body"
    r = api.post(f"{NS}/trajectories", content=b'{"task": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "body"
    r = api.post(
        f"{NS}/trajectories",
        content=b'{"task": "t", "steps": [{"state": {"observation": "o"}, "action": "a", "reward": NaN}]}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "steps[0].reward"


def limited_api(database_url: str, tmp_path: Any, **limits: Any) -> TestClient:
    """The app as admin, under `limits`."""
    return admin_api(make_settings(database_url, tmp_path, limits=Limits(**limits)))


def test_body_over_the_limit_is_413_before_parsing(database_url: str, tmp_path: Any) -> None:
    with limited_api(database_url, tmp_path, max_body_bytes=10_000) as c:
        create_namespace(c, "proj")
        r = c.post(f"{NS}/trajectories", json={"task": "x" * 20_000})
        assert r.status_code == 413
        assert r.json()["error"] == {
            "type": "payload_too_large",
            "message": "request body is larger than 10000 bytes; split it (e.g. smaller batches)",
            "field": "body",
            "rule": "max_body_bytes",
        }
        # Chunked upload with no Content-Length is caught while reading.
        r = c.post(
            f"{NS}/trajectories",
            content=iter([b'{"task": "', b"x" * 20_000, b'"}']),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413


def test_trajectory_step_cap(database_url: str, tmp_path: Any) -> None:
    with limited_api(database_url, tmp_path, max_steps_per_trajectory=3) as c:
        create_namespace(c, "proj")
        post_trajectory(c, "proj", "t", steps=[OK_STEP] * 2)
        r = c.post(f"{NS}/trajectories/t/steps", json={"steps": [OK_STEP] * 2})
        assert r.status_code == 422 and r.json()["error"]["rule"] == "max_steps_per_trajectory"
        assert c.get(f"{NS}/trajectories/t").json()["step_count"] == 2


def test_malformed_namespace_in_path(client: TestClient) -> None:
    r = client.post("/v1/namespaces/Not A Name/trajectories", json={"task": "t"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "ns"


def test_unknown_route_and_method_use_the_error_shape(client: TestClient) -> None:
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = client.put("/v1/namespaces")
    assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed"
