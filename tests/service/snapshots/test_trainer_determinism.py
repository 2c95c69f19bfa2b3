"""Every trainer read under a snapshot answers byte-identically while the namespace
goes on: ingest, reflection, curation and outcome credit (the issue's proof)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.factories import step
from tests.fixtures import create_namespace, drain, post_door_attempt, post_trajectory


def episode(api: TestClient, id: str, *, task: str, group: str, success: bool, **fields: Any) -> None:
    post_door_attempt(api, "lab", id, task=task, group=group, success=success, policy_version="p1", **fields)


def test_every_trainer_read_is_byte_identical_under_a_snapshot(client: TestClient) -> None:
    path = create_namespace(client, "lab")
    for i in range(4):
        episode(client, f"a{i}", task="open the door", group="g1" if i < 2 else "g2", success=i % 2 == 0)
    episode(client, "retry", task="open the door", group="g3", success=True, parent_trajectory_id="a1", attempt=2)
    drain(client)
    assert client.post(f"{path}/snapshots", json={"id": "epoch-1"}).status_code == 201

    contexts = {
        "snapshot": "epoch-1",
        "trajectories": [
            {"id": "a1"},
            {"id": "retry"},
            {
                "task": "open the door",
                "group_id": "g9",
                "steps": [step("you are in a hall, a door to the north", "go north")],
            },
        ],
        "teachers": [
            {"kind": "memory"},
            {"kind": "hindsight", "horizon": 1},
            {"kind": "evidence_card"},
            {"kind": "reflection"},
            {"kind": "attempt_summary"},
        ],
    }
    reads: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", f"{path}/retrieve", {"snapshot": "epoch-1", "state": {"observation": "a kitchen"}, "k": 50}),
        ("POST", f"{path}/distill/contexts", contexts),
        ("GET", f"{path}/tasks?snapshot=epoch-1", None),
        ("GET", f"{path}/tasks?snapshot=epoch-1&group_by=task,policy_version&sort=attempts", None),
    ]
    for dataset in ("trajectories", "sft", "preferences", "attempts"):
        for fmt in ("jsonl", "parquet"):
            reads.append(("GET", f"{path}/export?dataset={dataset}&format={fmt}&snapshot=epoch-1", None))

    def read_all() -> list[bytes]:
        out = []
        for method, url, body in reads:
            r = client.request(method, url, json=body)
            assert r.status_code == 200, (url, r.text)
            out.append(r.content)
        return out

    first = read_all()
    assert all(first)

    # the namespace goes on: ingest (more attempts and steps), reflection, curation, credit
    for i in range(4, 8):
        episode(client, f"a{i}", task="open the door", group="g4", success=i % 3 == 0)
    post_trajectory(client, "lab", "other-task", task="make tea", steps=[step("a kitchen", "boil water")], success=True)
    drain(client)
    served = client.post(f"{path}/retrieve", json={"state": {"observation": "a kitchen, a key on the table"}}).json()
    assert (
        client.post(f"{path}/retrievals/{served['retrieval_id']}/outcome", json={"success": False}).status_code == 200
    )
    live = client.get(f"{path}/reflections?limit=500").json()["items"]
    for item in live[:3]:
        assert (
            client.patch(f"{path}/reflections/{item['id']}", json={"text": item["text"] + " (edited)"}).status_code
            == 200
        )
    for item in live[3:6]:
        assert client.patch(f"{path}/reflections/{item['id']}", json={"status": "retired"}).status_code == 200
    drain(client)

    second = read_all()
    for (method, url, _), before, after in zip(reads, first, second, strict=True):
        assert after == before, f"{method} {url} changed under its snapshot"
    # and the live reads did change, so the comparison above means something
    assert client.get(f"{path}/tasks").content != first[2]
