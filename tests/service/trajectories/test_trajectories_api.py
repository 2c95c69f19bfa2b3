"""The v1 trajectory routes on SQLite and PostgreSQL: ingest, idempotent replays,
batches, listing, appends, outcomes and deletes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from store.database import Database
from store.models import Job, Reflection, ReflectionEvidence, Step, Trajectory
from tests import factories, fixtures

NS = "/v1/namespaces/proj"


def step(i: int | None = None, obs: str = "room", action: Any = "look", **extra: Any) -> dict[str, Any]:
    """A step whose observation names its index, given that index (none: the next one)."""
    return factories.step(f"{obs} {i}", action, **extra, **({} if i is None else {"index": i}))


@pytest.fixture
def api(client: TestClient) -> TestClient:
    fixtures.create_namespace(client, "proj")
    return client


def test_create_with_steps_and_read_back(api: TestClient) -> None:
    body = {
        "id": "t-1",
        "task": "make tea",
        "environment": "kitchen",
        "agent": "a1",
        "policy_version": "p7",
        "group_id": "g1",
        "metadata": {"seed": 3},
        "steps": [
            step(0, internal_state="find kettle", reward=0.0),
            step(1, action={"tool": "boil", "args": {"ml": 300}}, result="boiling", done=True, reward=1.0),
        ],
    }
    r = api.post(f"{NS}/trajectories", json=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["id"] == "t-1" and out["status"] == "open" and out["step_count"] == 2
    assert out["consistency_token"] and r.headers["X-Reflexa-Consistency-Token"] == out["consistency_token"]
    got = api.get(f"{NS}/trajectories/t-1").json()
    assert [s["index"] for s in got["steps"]] == [0, 1]
    assert got["steps"][0]["internal_state"] == "find kettle"
    assert got["steps"][1]["action"] == {"tool": "boil", "args": {"ml": 300}}
    assert got["steps"][1]["done"] is True and got["steps"][1]["truncated"] is False
    assert got["metadata"] == {"seed": 3} and got["group_id"] == "g1"


def test_same_id_same_body_is_a_replay_different_body_conflicts(api: TestClient, settings: Any) -> None:
    body = {"id": "t-2", "task": "x", "steps": [step(0)]}
    assert api.post(f"{NS}/trajectories", json=body).status_code == 201
    again = api.post(f"{NS}/trajectories", json=body)
    assert again.status_code == 200 and again.json()["step_count"] == 1
    # Omitting a default is the same body.
    same = {"id": "t-2", "task": "x", "steps": [{**step(0), "done": False}]}
    assert api.post(f"{NS}/trajectories", json=same).status_code == 200
    r = api.post(f"{NS}/trajectories", json={"id": "t-2", "task": "y", "steps": [step(0)]})
    assert r.status_code == 409 and r.json()["error"]["field"] == "id"
    db = Database(settings.resolved_database_url)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Step)) == 1
    db.dispose()


def test_server_generates_ids_when_none_given(api: TestClient) -> None:
    a = api.post(f"{NS}/trajectories", json={"task": "x"}).json()["id"]
    b = api.post(f"{NS}/trajectories", json={"task": "x"}).json()["id"]
    assert a != b


def test_batch_is_atomic_and_replays_count_as_existing(api: TestClient, settings: Any) -> None:
    group = [{"id": f"r{i}", "task": "t", "group_id": "g", "steps": [step(0), step(1)]} for i in range(4)]
    r = api.post(f"{NS}/trajectories/batch", json={"trajectories": group})
    assert r.status_code == 201, r.text
    assert [i["created"] for i in r.json()["items"]] == [True] * 4
    # A retried batch with one more item: old ones are replays, the new one is created.
    r = api.post(f"{NS}/trajectories/batch", json={"trajectories": [*group, {"id": "r4", "task": "t"}]})
    assert r.status_code == 201
    assert [i["created"] for i in r.json()["items"]] == [False] * 4 + [True]
    assert api.post(f"{NS}/trajectories/batch", json={"trajectories": group}).status_code == 200
    # One conflicting item fails the whole batch and names it; nothing else is written.
    bad = [{"id": "r5", "task": "t"}, {"id": "r6", "task": "t"}, {"id": "r1", "task": "different"}]
    r = api.post(f"{NS}/trajectories/batch", json={"trajectories": bad})
    assert r.status_code == 409 and r.json()["error"]["field"] == "trajectories[2].id"
    assert api.get(f"{NS}/trajectories/r5").status_code == 404
    # So does an invalid one, named down to the field.
    bad = [
        {"id": "r7", "task": "t"},
        {"id": "r8", "task": "t", "steps": [step(0), {"state": {}, "action": "a"}]},
    ]
    r = api.post(f"{NS}/trajectories/batch", json={"trajectories": bad})
    assert r.status_code == 422 and r.json()["error"]["field"] == "trajectories[1].steps[1].state.observation"
    assert api.get(f"{NS}/trajectories/r7").status_code == 404
    # Duplicate ids inside one batch.
    r = api.post(
        f"{NS}/trajectories/batch",
        json={"trajectories": [{"id": "d", "task": "t"}, {"id": "d", "task": "t"}]},
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "trajectories[1].id"


def test_list_filters_and_cursor_pagination(api: TestClient) -> None:
    for i in range(7):
        api.post(
            f"{NS}/trajectories",
            json={
                "id": f"l{i}",
                "task": f"task {i % 2}",
                "environment": "env-a" if i < 5 else "env-b",
                "outcome": {"success": i % 3 == 0} if i % 2 == 0 else None,
            },
        )
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.get(f"{NS}/trajectories", params=params).json()
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [f"l{i}" for i in reversed(range(7))]
    ids = lambda **p: [t["id"] for t in api.get(f"{NS}/trajectories", params=p).json()["items"]]  # noqa: E731
    assert ids(environment="env-b") == ["l6", "l5"]
    assert ids(task="task 1") == ["l5", "l3", "l1"]
    assert ids(status="open") == ["l5", "l3", "l1"]
    assert ids(success="true") == ["l6", "l0"]
    assert ids(status="closed", success="false") == ["l4", "l2"]
    page = api.get(f"{NS}/trajectories", params={"limit": 1, "include_steps": "true"}).json()
    assert page["items"][0]["steps"] == []
    r = api.get(f"{NS}/trajectories", params={"cursor": "garbage!"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "cursor"
    r = api.get(f"{NS}/trajectories", params={"limit": 100000})
    assert r.status_code == 422 and r.json()["error"]["field"] == "limit"


def test_append_steps_with_indexes_replays_and_gaps(api: TestClient) -> None:
    api.post(f"{NS}/trajectories", json={"id": "a", "task": "t", "steps": [step(0)]})
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(1), step(2)]})
    assert r.status_code == 200 and r.json()["appended"] == 2 and r.json()["step_count"] == 3
    # The same append retried: a replay, nothing new.
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(1), step(2)]})
    assert r.status_code == 200 and r.json()["appended"] == 0 and r.json()["step_count"] == 3
    # Overlapping retry: old ones replay, the new one lands.
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(2), step(3)]})
    assert r.json()["appended"] == 1 and r.json()["step_count"] == 4
    # Steps without an index take the next one.
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(), step()]})
    assert r.json()["step_count"] == 6
    # Same index, different content.
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(1, obs="other")]})
    assert r.status_code == 409 and r.json()["error"]["field"] == "steps[0]"
    # A gap.
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(9)]})
    assert r.status_code == 409 and r.json()["error"]["rule"] == "contiguous_index"
    r = api.post(f"{NS}/trajectories/a/steps", json={"steps": [step(6), step(6)]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "steps[1].index"
    assert [s["index"] for s in api.get(f"{NS}/trajectories/a").json()["steps"]] == list(range(6))
    assert api.post(f"{NS}/trajectories/nope/steps", json={"steps": [step()]}).status_code == 404


def test_new_trajectory_steps_must_number_from_zero(api: TestClient) -> None:
    r = api.post(f"{NS}/trajectories", json={"id": "z", "task": "t", "steps": [step(1)]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "steps[0].index"


def test_outcome_closes_queues_reflection_once_and_replays(api: TestClient, settings: Any) -> None:
    api.post(f"{NS}/trajectories", json={"id": "o", "task": "t", "steps": [step(0)]})
    out = {"success": False, "reward": -1.0, "failure_reason": "timeout", "details": {"turns": 30}}
    r = api.post(f"{NS}/trajectories/o/outcome", json=out)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "closed" and body["outcome"] == out and body["closed_at"]
    assert body["consistency_token"] != "c1.0"
    again = api.post(f"{NS}/trajectories/o/outcome", json=out)
    assert again.status_code == 200
    r = api.post(f"{NS}/trajectories/o/outcome", json={**out, "success": True})
    assert r.status_code == 409 and r.json()["error"]["field"] == "outcome"
    # Appending to a closed trajectory is refused; replaying a stored step is not.
    r = api.post(f"{NS}/trajectories/o/steps", json={"steps": [step(1)]})
    assert r.status_code == 409 and r.json()["error"]["rule"] == "trajectory_open"
    assert api.post(f"{NS}/trajectories/o/steps", json={"steps": [step(0)]}).status_code == 200
    db = Database(settings.resolved_database_url)
    with db.read() as s:
        jobs = s.scalars(select(Job)).all()
    db.dispose()
    assert [(j.kind, j.status, j.payload["trajectory_id"]) for j in jobs] == [("trajectory.closed", "queued", "o")]


def test_create_closed_trajectory_queues_its_job(api: TestClient, settings: Any) -> None:
    r = api.post(f"{NS}/trajectories", json={"id": "c", "task": "t", "steps": [step(0)], "outcome": {"success": True}})
    assert r.json()["status"] == "closed"
    db = Database(settings.resolved_database_url)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 1
    db.dispose()


def test_delete_removes_steps_and_reflections_derived_only_from_it(api: TestClient, settings: Any) -> None:
    api.post(f"{NS}/trajectories", json={"id": "d1", "task": "t", "steps": [step(0), step(1)]})
    api.post(f"{NS}/trajectories", json={"id": "d2", "task": "t", "steps": [step(0)]})
    db = Database(settings.resolved_database_url)
    with db.write() as s:
        pk1 = s.scalar(select(Trajectory.pk).where(Trajectory.id == "d1"))
        pk2 = s.scalar(select(Trajectory.pk).where(Trajectory.id == "d2"))
        only = factories.add_reflection(s, "proj", "only", kind="exemplar")
        shared = factories.add_reflection(s, "proj", "shared", kind="heuristic")
        s.add_all(
            [
                ReflectionEvidence(reflection_pk=only.pk, trajectory_pk=pk1, step_start=0, step_end=1),
                ReflectionEvidence(reflection_pk=shared.pk, trajectory_pk=pk1, step_start=0, step_end=0),
                ReflectionEvidence(reflection_pk=shared.pk, trajectory_pk=pk2, step_start=0, step_end=0),
            ]
        )
    r = api.delete(f"{NS}/trajectories/d1")
    assert r.status_code == 200 and r.json() == {"id": "d1", "deleted_steps": 2, "deleted_reflections": 1}
    assert api.get(f"{NS}/trajectories/d1").status_code == 404
    with db.read() as s:
        assert s.scalars(select(Reflection.id)).all() == ["shared"]
        assert s.scalars(select(ReflectionEvidence.trajectory_pk)).all() == [pk2]
        assert s.scalar(select(func.count()).select_from(Step)) == 1
    db.dispose()
    assert api.delete(f"{NS}/trajectories/d1").status_code == 404


def test_unknown_namespace_is_404(api: TestClient) -> None:
    r = api.post("/v1/namespaces/nope/trajectories", json={"task": "t"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    assert api.get("/v1/namespaces/nope/trajectories").status_code == 404


def test_namespace_create_is_idempotent(client: TestClient) -> None:
    assert client.post("/v1/namespaces", json={"name": "n1", "settings": {"gamma": 0.9}}).status_code == 201
    assert client.post("/v1/namespaces", json={"name": "n1", "settings": {"gamma": 0.9}}).status_code == 200
    r = client.post("/v1/namespaces", json={"name": "n1", "settings": {"gamma": 0.5}})
    assert r.status_code == 409
    r = client.post("/v1/namespaces", json={"name": "n2", "settings": {"gamma": 2}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "settings.gamma"
    r = client.post("/v1/namespaces", json={"name": "Bad/Name"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name"
    assert [n["name"] for n in client.get("/v1/namespaces").json()["items"]] == ["n1"]
