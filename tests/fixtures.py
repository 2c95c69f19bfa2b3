"""Shared helpers for the tests that go through the API (a TestClient on the app, see
conftest's `client`); the pytest fixtures live in conftest.py, the data factories
(request bodies, store rows, reflector drafts) in tests/factories.py.

    ns = create_namespace(api, "mem", gamma=0.5)       # asserts 201; "/v1/namespaces/mem"
    post_trajectory(api, "mem", "t1", steps=[step("a kitchen", "boil water")], success=True)
    drain(api)                                         # run the queued jobs to completion
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fastapi.testclient import TestClient

from reflectors.worker import Worker
from tests.factories import door_outcome, door_steps, trajectory

# -- through the API --------------------------------------------------------------


def ns_path(namespace: str) -> str:
    return f"/v1/namespaces/{namespace}"


def create_namespace(api: TestClient, name: str, **settings: Any) -> str:
    """Create a namespace with these settings (201 asserted); returns its path."""
    body: dict[str, Any] = {"name": name}
    if settings:
        body["settings"] = settings
    r = api.post("/v1/namespaces", json=body)
    assert r.status_code == 201, r.text
    return ns_path(name)


def post_trajectory(api: TestClient, namespace: str, id: str | None = None, **body: Any) -> dict[str, Any]:
    """POST a new trajectory (the keywords of `trajectory`); asserts 201 and returns
    the response body (its `consistency_token`, `status`, …)."""
    r = api.post(f"{ns_path(namespace)}/trajectories", json=trajectory(id, **body))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def post_door_attempt(
    api: TestClient, namespace: str, id: str, *, group: str, success: bool, task: str = "open the door", **fields: Any
) -> dict[str, Any]:
    """POST one closed attempt of `door_steps` in rollout group `group`; other fields
    (policy_version, parent_trajectory_id, attempt, …) pass through."""
    return post_trajectory(
        api,
        namespace,
        id,
        task=task,
        group_id=group,
        steps=door_steps(success),
        outcome=door_outcome(success),
        **fields,
    )


def drain(api: TestClient, *, skip: Collection[str] = ()) -> int:
    """Run the queued jobs to completion with the app's worker; returns how many ran.

    `skip`: job kinds to leave queued. The rest then run on a one-slot worker
    without those handlers (a job stays queued until a later plain `drain`)."""
    worker: Worker = api.app.state.services.worker  # type: ignore[attr-defined]
    if not skip:
        return worker.run_until_idle()
    others = {kind: handler for kind, handler in worker.handlers.items() if kind not in skip}
    return Worker(worker.db, others).run_until_idle()
