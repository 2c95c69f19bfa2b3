"""Teacher contexts and their chat messages are built without validation
(`model_construct`, service/distill/contexts/service.py): every value must already be
what validation would make of it, type included, for every teacher kind, applicable
or not, with and without the shared-history form and a fade."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.distill.contexts.schemas import ContextsResponse, TeacherContext
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory
from tests.service.retrieval.test_retrieval_items import same_types

NS = "/v1/namespaces/lab"
TEACHERS = [
    {"kind": "memory", "k": 5},
    {"kind": "hindsight", "horizon": 2},
    {"kind": "reflection"},
    {"kind": "evidence_card"},
    {"kind": "attempt_summary"},
]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"include": ["parts"]},
        {"include": ["text", "messages", "parts"], "fade": {"by": "task_success", "policy_version": "v1"}},
    ],
)
def test_built_contexts_equal_validated_ones_field_by_field(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]
) -> None:
    create_namespace(client, "lab")
    # the memory teacher serves what other tasks' rollouts left (its own task is guarded)
    for i, (task, ok) in enumerate([("find the exit", True), ("find the exit", False), ("find the key", True)]):
        steps = [
            step(f"You are in room {j}. A door leads north.", {"name": "go", "args": {"to": "north"}}, reward=0.1)
            for j in range(4)
        ]
        post_trajectory(client, "lab", f"t{i}", task=task, steps=steps, outcome={"success": ok}, policy_version="v1")
    drain(client)
    distill = client.app.state.services.distill  # type: ignore[attr-defined]
    original = distill.contexts
    built: list[ContextsResponse] = []

    def keep(*args: Any, **kw: Any) -> ContextsResponse:
        built.append(original(*args, **kw))
        return built[-1]

    monkeypatch.setattr(distill, "contexts", keep)
    body = {"trajectories": [{"id": "t0"}, {"id": "t1"}], "teachers": TEACHERS, **extra}
    r = client.post(f"{NS}/distill/contexts", json=body)
    assert r.status_code == 200, r.text
    (response,) = built
    teachers = [(key, t) for traj in response.trajectories for s in traj.steps for key, t in s.teachers.items()]
    assert any(t.applicable for _, t in teachers) and any(not t.applicable for _, t in teachers)
    assert any(key.startswith("memory") and t.item_ids for key, t in teachers)  # items were served
    for key, teacher in teachers:
        # validated from what was set: the same values, types and set fields
        validated = TeacherContext.model_validate(teacher.model_dump(exclude_unset=True))
        same_types(teacher.model_dump(), validated.model_dump(), key)
        assert teacher.model_fields_set == validated.model_fields_set, key
        assert teacher.leakage.model_fields_set == validated.leakage.model_fields_set, key
    whole = ContextsResponse.model_validate(response.model_dump())
    same_types(response.model_dump(), whole.model_dump(), "response")
