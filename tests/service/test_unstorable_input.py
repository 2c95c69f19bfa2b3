"""Input storage cannot hold is refused in every field of every route, derived from
the live OpenAPI document: every string field of every request body (at any depth,
through $refs, arrays, unions and free-form objects), every query parameter and
every path parameter gets a NUL, an unpaired surrogate (bodies only: a URL cannot
carry one) and an over-long value. Each is a 422 naming the field and the rule, on
SQLite and PostgreSQL, and the store is unchanged afterwards.

A route added later is covered without editing this file, except that a route
with a body needs a valid example body below (the test says so when one lacks it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.app import create_app
from store.database import Database
from store.models import Base
from tests.conftest import ADMIN_KEY, make_settings
from tests.fixtures import create_namespace, post_trajectory

MAX_TEXT = 500  # limits.max_text_chars for this test, so over-long values stay small
STEP = {"state": {"observation": "a door", "data": {"x": 1}}, "internal_state": "go", "action": "open"}
TRAJECTORY = {
    "id": "t-new",
    "task": "open the door",
    "environment": "house",
    "agent": "a",
    "policy_version": "p1",
    "group_id": "g1",
    "metadata": {"note": "n"},
    "steps": [STEP],
    "outcome": {"success": True, "reward": 1.0, "failure_reason": "none", "details": {"why": "w"}},
    "retrieval_ids": ["r1"],
}
# A valid body for each operation that takes one; the bad value is put into a copy.
BODIES: dict[str, dict[str, Any]] = {
    "create_key": {"role": "agent", "namespaces": ["proj"], "description": "d"},
    "create_namespace": {"name": "other", "settings": {}},
    "create_trajectory": TRAJECTORY,
    "create_trajectories_batch": {"trajectories": [TRAJECTORY]},
    "append_steps": {"steps": [STEP]},
    "close_trajectory": {"success": False, "reward": 0.0, "failure_reason": "fell", "details": {"k": "v"}},
    "retrieve": {
        "state": {"observation": "a door", "data": {"x": 1}},
        "internal_state": "go",
        "task": "open the door",
        "environment": "house",
        "filters": {"agent": "a", "policy_version": "p1", "exclude_tasks": ["t"], "exclude_trajectory_ids": ["x"]},
        "render": {"format": "text"},
        "trajectory_id": "open",
    },
    "report_retrieval_outcome": {"success": True, "trajectory_id": "open", "details": {"k": "v"}, "item_ids": ["i"]},
    "update_reflection": {"content": {"text": "t"}, "text": "t", "status": "active", "note": "why"},
    "create_snapshot": {"id": "s1", "note": "before epoch 3"},
}
BODIES["distill_contexts"] = {
    "trajectories": [{"id": "open"}, {**TRAJECTORY, "id": "inline"}],
    "teachers": [{"kind": "memory", "name": "m", "kinds": ["skill"]}, {"kind": "hindsight", "horizon": 2}],
    "template": "default",
}
BODIES["distill_prefixes"] = {
    "tasks": ["open the door"],
    "step": 3,
    "schedule": {"kind": "step_decay", "start_fraction": 0.5, "half_life_steps": 10},
}
BODIES["distill_teacher_logprobs"] = {
    "items": [{"id": "i1", "continuation": {"text": "go north"}, "context": {"text": "You are in a hall"}}]
}
BODIES["check_action"] = {
    "state": {"observation": "a door", "data": {"x": 1}},
    "internal_state": "go",
    "task": "open the door",
    "action": {"name": "open", "arguments": {"door": "front"}},
    "environment": "house",
    "filters": {"agent": "a", "exclude_tasks": ["t"], "exclude_trajectory_ids": ["x"]},
}
BODIES["retrieve_batch"] = {"requests": [BODIES["retrieve"], {"state": {"observation": "a hall"}}]}
BODIES["distill_advantages"] = {
    "method": "token_signal",
    "params": {"teacher": "h1"},
    "groups": [
        {
            "group_id": "g1",
            "trajectories": [
                {
                    "id": "a",
                    "reward": 1.0,
                    "advantages": 1.0,
                    "logprobs": {"student": [-1.0], "teacher": {"h1": [-0.5]}},
                }
            ],
        }
    ],
}
BODIES["create_rubric"] = {
    "id": "r1",
    "name": "n",
    "task": "t",
    "environment": "e",
    "criteria": [{"id": "c1", "text": "t", "weight": 1, "check": {"type": "contains", "text": "x"}, "stage": "s"}],
}
BODIES["score_rubric"] = {"trajectory": {**TRAJECTORY, "id": "inline"}, "final_answer": "a", "label": "l"}
BODIES["score_rubric_batch"] = {"items": [{"trajectory_id": "open", "label": "l"}], "snapshot": "s1"}
BODIES["create_reward_capability"] = {"note": "n"}
BODIES["rotate_key"] = {"grace_seconds": 60, "description": "d"}
BODIES["openrlhf_reward"] = {"query": ["p q"], "prompts": ["p"], "labels": ["l"]}
PATH_VALUES = {"ns": "proj", "id": "open", "retrieval_id": "r1", "capability_id": "cap_1", "capability": "rfxrw_x"}
FREE_KEY = "k"  # the key under which a free-form object (metadata, state data) gets a string


@pytest.fixture
def api(database_url: str, tmp_path: Any) -> Iterator[TestClient]:
    settings = make_settings(database_url, tmp_path, limits={"max_text_chars": MAX_TEXT})
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as client:
        create_namespace(client, "proj")
        post_trajectory(client, "proj", "open", steps=[STEP])
        yield client


def row_counts(url: str) -> dict[str, int]:
    db = Database(url)
    with db.read() as session:
        out = {t.name: session.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables}
    db.dispose()
    return out


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def string_paths(schema: dict[str, Any], components: dict[str, Any], path: str = "", depth: int = 0) -> set[str]:
    """Every place a string can stand in values of this schema, as error field paths."""
    if depth > 12:
        return set()
    schema = _resolve(schema, components)
    out: set[str] = set()
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", []):
        out |= string_paths(branch, components, path, depth + 1)
    kind = schema.get("type")
    if kind == "string":
        out.add(path)
    elif kind == "array" and "items" in schema:
        out |= string_paths(schema["items"], components, f"{path}[0]", depth + 1)
    elif kind == "object" or "properties" in schema:
        for name, sub in schema.get("properties", {}).items():
            out |= string_paths(sub, components, f"{path}.{name}" if path else name, depth + 1)
        if schema.get("additionalProperties", not schema.get("properties")) not in (False, None):
            out.add(f"{path}.{FREE_KEY}" if path else FREE_KEY)  # a free-form object holds strings too
    return out


def put(body: Any, path: str, value: str) -> Any:
    """A copy of `body` with `value` at `path` (`a.b[0].c`), making what is missing."""
    out = copy.deepcopy(body)
    parts: list[str | int] = []
    for piece in path.split("."):
        name, _, rest = piece.partition("[")
        if name:
            parts.append(name)
        if rest:
            parts.extend(int(i) for i in rest.rstrip("]").split("]["))
    node = out
    for part, nxt in zip(parts, parts[1:], strict=False):
        if isinstance(part, int):
            while len(node) <= part:
                node.append({} if isinstance(nxt, str) else [])
            if not isinstance(node[part], dict | list):
                node[part] = {} if isinstance(nxt, str) else []
        elif not isinstance(node.get(part), dict | list):
            node[part] = {} if isinstance(nxt, str) else []
        node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = value
    return out


BAD_BODY_VALUES = {"nul": ("a\x00b", "valid_unicode"), "surrogate": ("a\ud800b", "valid_unicode")}
BAD_URL_VALUES = {"nul": ("a\x00b", "valid_unicode")}
OVER_LONG = ("x" * (MAX_TEXT + 1), "max_text_chars")


def cases(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any], str | None, str, str]]:
    """(label, method, url, query, json text, expected field, expected rule)."""
    components = spec["components"]["schemas"]
    for template, ops in spec["paths"].items():
        for method, op in ops.items():
            params = op.get("parameters", [])
            path_names = [p["name"] for p in params if p["in"] == "path"]
            url = template.format(**{n: PATH_VALUES[n] for n in path_names})
            body = None
            if "requestBody" in op:
                assert op["operationId"] in BODIES, f"{op['operationId']} takes a body: add a valid one to BODIES"
                body = BODIES[op["operationId"]]
            text = None if body is None else json.dumps(body)
            for name in path_names:
                for bad, rule in (*BAD_URL_VALUES.values(), OVER_LONG):
                    bad_url = template.format(
                        **{n: quote(bad, safe="") if n == name else PATH_VALUES[n] for n in path_names}
                    )
                    yield f"{op['operationId']} path {name}", method, bad_url, {}, text, name, rule
            for p in params:
                if p["in"] == "query":
                    for bad, rule in (*BAD_URL_VALUES.values(), OVER_LONG):
                        yield f"{op['operationId']} ?{p['name']}", method, url, {p["name"]: bad}, text, p["name"], rule
            if body is not None:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                fields = string_paths(schema, components)
                assert fields, op["operationId"]
                for field in sorted(fields):
                    for bad, rule in (*BAD_BODY_VALUES.values(), OVER_LONG):
                        bad_text = json.dumps(put(body, field, bad))  # ensure_ascii: a lone surrogate as \\ud800
                        yield f"{op['operationId']} {field}", method, url, {}, bad_text, field, rule


def test_every_field_of_every_route_refuses_what_storage_cannot_hold(api: TestClient, database_url: str) -> None:
    spec = api.get("/openapi.json").json()
    before = row_counts(database_url)
    seen_routes = set()
    failures = []
    n = 0
    for label, method, url, query, text, field, rule in cases(spec):
        n += 1
        seen_routes.add(label.split(" ")[0])
        headers = {"content-type": "application/json"} if text is not None else {}
        response = api.request(method.upper(), url, params=query, content=text, headers=headers)
        error = response.json().get("error", {}) if response.headers.get("content-type", "").startswith("app") else {}
        got = (response.status_code, error.get("type"), error.get("field"), error.get("rule"))
        if got != (422, "invalid_input", field, rule):
            failures.append(f"{label} [{rule}]: {got} {response.text[:200]}")
    assert not failures, f"{len(failures)} of {n} cases:\n" + "\n".join(failures[:40])
    assert n > 300  # the sweep really covers the surface
    # every route with a parameter or a body was exercised
    expected = {
        op["operationId"]
        for ops in spec["paths"].values()
        for op in ops.values()
        if op.get("parameters") or "requestBody" in op
    }
    assert expected <= seen_routes
    assert row_counts(database_url) == before


def test_a_nul_in_a_list_filter_and_in_retrieve_filters_is_a_clear_422(api: TestClient) -> None:
    """The two the issue names: a 500 on PostgreSQL before (JSONB cannot hold NUL)."""
    r = api.get("/v1/namespaces/proj/trajectories", params={"environment": "\x00"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "environment"
    body = {"state": {"observation": "o"}, "environment": "e\x00", "filters": {"exclude_tasks": ["t\x00"]}}
    r = api.post("/v1/namespaces/proj/retrieve", json=body)
    assert r.status_code == 422
    assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == ("environment", "valid_unicode")
    body = {"state": {"observation": "o"}, "filters": {"exclude_tasks": ["ok", "t\x00"]}}
    r = api.post("/v1/namespaces/proj/retrieve", json=body)
    assert r.json()["error"]["field"] == "filters.exclude_tasks[1]"


def test_keys_of_free_form_objects_and_non_finite_numbers_are_refused(api: TestClient) -> None:
    step = {**STEP, "metadata": {"bad\x00key": 1}}
    r = api.post("/v1/namespaces/proj/trajectories", json={"task": "t", "steps": [step]})
    assert r.status_code == 422
    assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == ("steps[0].metadata.bad\x00key", "valid_unicode")
    text = '{"task": "t", "metadata": {"x": NaN}}'
    r = api.post("/v1/namespaces/proj/trajectories", content=text, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == ("metadata.x", "finite_number")


def test_walking_an_ingest_body_keeps_its_field_paths_in_a_batch(api: TestClient) -> None:
    bad = copy.deepcopy(TRAJECTORY)
    bad["steps"] = [STEP, {**STEP, "result": "r\x00"}]
    r = api.post("/v1/namespaces/proj/trajectories/batch", json={"trajectories": [TRAJECTORY, bad]})
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "trajectories[1].steps[1].result"
