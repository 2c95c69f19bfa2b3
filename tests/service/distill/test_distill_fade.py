"""Scaffold fading (Pats) in POST …/distill/contexts, on both engines: a teacher's
budget (characters and items) times share = max(floor, 1 − the task's success rate
for fade.policy_version), the rate exactly GET …/tasks's; the full budget below
min_attempts or for a version that never tried; a teacher faded to nothing is not
applicable and says why; only the named teachers fade; pinned by a snapshot; bad
input names the field and the rule."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import step
from tests.fixtures import create_namespace, post_trajectory

NS = "/v1/namespaces/lab"
URL = f"{NS}/distill/contexts"
HINDSIGHT = {"kind": "hindsight", "horizon": 3}
STEPS = [step(f"room {i}", f"go {i}", result=f"in room {i + 1}", reward=0.1) for i in range(5)]


def attempts(api: TestClient, task: str, outcomes: list[bool], version: str, tag: str) -> None:
    for i, ok in enumerate(outcomes):
        post_trajectory(
            api, "lab", f"{tag}-{i}", task=task, steps=STEPS, outcome={"success": ok}, policy_version=version
        )


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "lab")
    attempts(client, "mostly solved", [True, True, True, False], "v1", "a")  # rate 0.75 over 4
    attempts(client, "barely tried", [True, False], "v1", "b")  # 2 attempts: under min_attempts
    attempts(client, "solved", [True] * 4, "v1", "c")  # rate 1.0
    return client


def contexts(api: TestClient, trajectory: str, fade: dict[str, Any] | None, **body: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"trajectories": [{"id": trajectory}], "steps": [0], "teachers": [HINDSIGHT], **body}
    if fade is not None:
        request["fade"] = fade
    r = api.post(URL, json=request)
    assert r.status_code == 200, r.text
    return r.json()["trajectories"][0]["steps"][0]["teachers"]  # type: ignore[no-any-return]


# hindsight@3 at step 0: this step's result, the 3 steps ahead, "the attempt went on" (no item id)
PIECES = 5
ITEMS = ["step:0", "step:1", "step:2", "step:3"]


def test_the_budget_shrinks_with_the_tasks_success(api: TestClient) -> None:
    full = contexts(api, "a-0", None)["hindsight@3"]
    assert full["budget"] is None and full["applicable"] and full["item_ids"] == ITEMS and full["omitted_items"] == 0
    faded = contexts(api, "a-0", {"by": "task_success", "policy_version": "v1"})["hindsight@3"]
    budget = faded["budget"]
    assert budget["success_rate"] == 0.75 and budget["attempts"] == 4
    assert budget["share"] == pytest.approx(0.25)
    assert budget["max_chars"] == 1000 and budget["max_items"] == 1  # ⌊4000 · 0.25⌋, ⌊5 · 0.25⌋
    assert faded["item_ids"] == ["step:0"] and faded["omitted_items"] == PIECES - 1 and faded["applicable"]
    # the rate is exactly GET …/tasks's for that task and version
    r = api.get(f"{NS}/tasks", params={"group_by": "task,policy_version", "policy_version": "v1", "sort": "task"})
    (row,) = [t for t in r.json()["items"] if t["task"] == "mostly solved"]
    assert row["success_rate"] == budget["success_rate"] and row["attempts"] == budget["attempts"]


def test_the_floor_keeps_part_of_the_budget(api: TestClient) -> None:
    faded = contexts(api, "a-0", {"by": "task_success", "policy_version": "v1", "floor": 0.5})["hindsight@3"]
    assert faded["budget"]["share"] == 0.5 and faded["budget"]["max_items"] == 2
    assert faded["item_ids"] == ["step:0", "step:1"]  # by priority: this step, then the nearest ahead


def test_too_few_attempts_or_another_version_keep_the_full_budget(api: TestClient) -> None:
    full = contexts(api, "b-0", None)["hindsight@3"]
    few = contexts(api, "b-0", {"by": "task_success", "policy_version": "v1"})["hindsight@3"]
    assert few["budget"]["share"] == 1.0 and few["budget"]["attempts"] == 2 and few["text"] == full["text"]
    lowered = contexts(api, "b-0", {"by": "task_success", "policy_version": "v1", "min_attempts": 2})["hindsight@3"]
    assert lowered["budget"]["share"] == 0.5
    other = contexts(api, "a-0", {"by": "task_success", "policy_version": "v2"})["hindsight@3"]
    assert other["budget"] == {
        "share": 1.0,
        "success_rate": None,
        "attempts": 0,
        "max_chars": 4000,
        "max_tokens": None,
        "max_items": 5,
    }


def test_a_solved_task_fades_its_scaffold_out(api: TestClient) -> None:
    faded = contexts(api, "c-0", {"by": "task_success", "policy_version": "v1"})["hindsight@3"]
    assert not faded["applicable"] and faded["item_ids"] == [] and faded["budget"]["max_items"] == 0
    assert faded["reason"].startswith("faded out: the task's success rate for policy version 'v1' is 1.00")


def test_only_the_named_teachers_fade(api: TestClient) -> None:
    teachers = [HINDSIGHT, {"kind": "hindsight", "horizon": 3, "name": "kept"}]
    fade = {"by": "task_success", "policy_version": "v1", "teachers": ["hindsight@3"]}
    out = contexts(api, "a-0", fade, teachers=teachers)
    assert out["hindsight@3"]["budget"]["share"] == pytest.approx(0.25) and out["kept"]["budget"] is None
    assert out["kept"]["item_ids"] == ITEMS


def test_a_snapshot_pins_the_rate(api: TestClient) -> None:
    assert api.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    fade = {"by": "task_success", "policy_version": "v1"}
    pinned = contexts(api, "a-0", fade, snapshot="s1")
    attempts(api, "mostly solved", [False, False, False, False], "v1", "late")  # 3 of 8 now
    assert contexts(api, "a-0", fade, snapshot="s1") == pinned
    live = contexts(api, "a-0", fade)["hindsight@3"]["budget"]
    assert live["success_rate"] == 3 / 8 and live["share"] == pytest.approx(5 / 8)
    assert live["max_items"] == math.floor(5 * 5 / 8) and live["max_chars"] == 2500


@pytest.mark.parametrize(
    ("fade", "field", "rule"),
    [
        ({"by": "reward", "policy_version": "v1"}, "fade.by", "literal_error"),
        ({"by": "task_success"}, "fade.policy_version", "missing"),
        ({"by": "task_success", "policy_version": "v1", "floor": 1.5}, "fade.floor", "less_than_equal"),
        ({"by": "task_success", "policy_version": "v1", "min_attempts": 0}, "fade.min_attempts", "greater_than_equal"),
        ({"by": "task_success", "policy_version": "v1", "teachers": ["memory"]}, "fade.teachers[0]", "known_teacher"),
    ],
)
def test_bad_fades_name_the_field_and_the_rule(api: TestClient, fade: dict[str, Any], field: str, rule: str) -> None:
    r = api.post(URL, json={"trajectories": [{"id": "a-0"}], "teachers": [HINDSIGHT], "fade": fade})
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == (field, rule)
