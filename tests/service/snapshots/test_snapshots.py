"""Snapshots: memory pinned for trainers (byte-identical reads while the namespace
changes), their lifecycle, and evaluation freezes."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory


def seed(api: TestClient, ns: str, prefix: str, n: int = 3) -> None:
    for i in range(n):
        post_trajectory(
            api,
            ns,
            f"{prefix}{i}",
            task=f"open the door {i % 2}",
            group_id=f"{prefix}g{i // 2}",
            steps=[
                step(f"a red door, key at {i} steps left", "go to the key"),
                step(f"holding the key, door {i} steps ahead", "open the door", reward=1.0),
            ],
            success=i % 2 == 0,
        )
    drain(api)


def retrieve_body(snapshot: str, observation: str, **extra: Any) -> dict[str, Any]:
    return {"snapshot": snapshot, "state": {"observation": observation}, "task": "open the door 0", "k": 20, **extra}


def churn(api: TestClient, ns: str, path: str) -> None:
    """Everything that changes live memory: ingest, reflection, curation, credit."""
    seed(api, "mem", "late", 4)
    items = api.post(f"{path}/retrieve", json={"state": {"observation": "a red door, key at 1 steps left"}}).json()
    ids = [it["id"] for it in items["items"]]
    assert len(ids) >= 2
    r = api.post(f"{path}/retrievals/{items['retrieval_id']}/outcome", json={"success": True, "reward": 1.0})
    assert r.status_code == 200 and r.json()["credited_items"] > 0, r.text
    r = api.patch(f"{path}/reflections/{ids[0]}", json={"text": "an edited text", "note": "curation"})
    assert r.status_code == 200, r.text
    r = api.patch(f"{path}/reflections/{ids[1]}", json={"status": "retired"})
    assert r.status_code == 200, r.text
    drain(api)


def test_reads_under_a_snapshot_are_byte_identical_while_memory_changes(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    seed(client, "mem", "early")
    snap = client.post(f"{path}/snapshots", json={"id": "s1", "note": "before epoch 3"})
    assert snap.status_code == 201, snap.text
    body = snap.json()
    assert body["id"] == "s1" and body["reflection_count"] > 0
    assert body["trajectory_count"] == 3 and body["step_count"] == 6

    queries = [
        ("/retrieve", retrieve_body("s1", "a red door, key at 1 steps left")),
        ("/retrieve", retrieve_body("s1", "holding the key", internal_state="open it", render={"format": "text"})),
        ("/retrieve", retrieve_body("s1", "door", filters={"exclude_trajectory_ids": ["early0"]})),
        (
            "/retrieve/batch",
            {"requests": [retrieve_body("s1", "a red door"), retrieve_body("s1", "key at 2 steps left", k=3)]},
        ),
    ]
    first = [client.post(path + route, json=q) for route, q in queries]
    for r in first:
        assert r.status_code == 200, r.text
    one = first[0].json()
    assert one["retrieval_id"] is None and one["items"]

    churn(client, "mem", path)
    live = client.post(f"{path}/retrieve", json={"state": {"observation": "a red door, key at 1 steps left"}})
    assert live.json()["items"] != one["items"]  # the live namespace did change

    again = [client.post(path + route, json=q) for route, q in queries]
    for before, after in zip(first, again, strict=True):
        assert after.content == before.content


def test_snapshot_keeps_the_version_status_and_utility_of_its_moment(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    seed(client, "mem", "early")
    client.post(f"{path}/snapshots", json={"id": "s1"})
    pinned = client.post(f"{path}/retrieve", json=retrieve_body("s1", "a red door, key at 1 steps left")).json()
    churn(client, "mem", path)
    again = client.post(f"{path}/retrieve", json=retrieve_body("s1", "a red door, key at 1 steps left")).json()
    by_id = {it["id"]: it for it in again["items"]}
    for item in pinned["items"]:
        assert by_id[item["id"]]["version"] == item["version"]
        assert by_id[item["id"]]["status"] == "active"
        assert by_id[item["id"]]["utility"] == item["utility"]
    live = {it["id"]: it for it in client.get(f"{path}/reflections?limit=200").json()["items"]}
    assert any(live[i]["version"] > by_id[i]["version"] or live[i]["status"] != "active" for i in by_id)


def test_snapshot_lifecycle_and_idempotent_create(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    seed(client, "mem", "t", 1)
    a = client.post(f"{path}/snapshots", json={"id": "a", "note": "x"})
    assert a.status_code == 201
    replay = client.post(f"{path}/snapshots", json={"id": "a", "note": "x"})
    assert replay.status_code == 200 and replay.json() == a.json()
    clash = client.post(f"{path}/snapshots", json={"id": "a", "note": "other"})
    assert clash.status_code == 409 and clash.json()["error"]["field"] == "id"
    b = client.post(f"{path}/snapshots", json={})
    assert b.status_code == 201 and b.json()["id"].startswith("snap_")
    page = client.get(f"{path}/snapshots?limit=1").json()
    assert [s["id"] for s in page["items"]] == [b.json()["id"]] and page["next_cursor"]
    rest = client.get(f"{path}/snapshots?limit=1&cursor={page['next_cursor']}").json()
    assert [s["id"] for s in rest["items"]] == ["a"] and rest["next_cursor"] is None
    assert client.get(f"{path}/snapshots/a").json()["note"] == "x"
    assert client.delete(f"{path}/snapshots/a").status_code == 204
    gone = client.get(f"{path}/snapshots/a")
    assert gone.status_code == 404
    r = client.post(f"{path}/retrieve", json=retrieve_body("a", "door"))
    assert r.status_code == 404 and r.json()["error"]["field"] == "snapshot"


def test_snapshot_of_another_namespace_and_bad_combinations(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    other = create_namespace(client, "other")
    client.post(f"{other}/snapshots", json={"id": "theirs"})
    r = client.post(f"{path}/retrieve", json=retrieve_body("theirs", "door"))
    assert r.status_code == 404 and r.json()["error"]["field"] == "snapshot"
    client.post(f"{path}/snapshots", json={"id": "mine"})
    r = client.post(f"{path}/retrieve", json=retrieve_body("mine", "door", consistency_token="x"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "consistency_token"
    assert r.json()["error"]["rule"] == "not_with_snapshot"
    mixed = {"requests": [retrieve_body("mine", "door"), {"state": {"observation": "door"}}]}
    r = client.post(f"{path}/retrieve/batch", json=mixed)
    assert r.status_code == 422 and r.json()["error"]["field"] == "requests[1].snapshot"


def test_snapshot_permissions(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    create_namespace(client, "other")
    keys = {
        role: client.post("/v1/keys", json={"role": role, "namespaces": ["mem"]}).json()["key"]
        for role in ("agent", "trainer", "operator")
    }

    def as_(role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {keys[role]}"}

    assert client.post(f"{path}/snapshots", json={"id": "t"}, headers=as_("trainer")).status_code == 201
    assert client.get(f"{path}/snapshots", headers=as_("operator")).status_code == 200
    r = client.post(f"{path}/snapshots", json={"id": "x"}, headers=as_("agent"))
    assert r.status_code == 403
    # an agent may still read under a snapshot it is told about (evaluation runs)
    assert client.post(f"{path}/retrieve", json=retrieve_body("t", "door"), headers=as_("agent")).status_code == 200
    r = client.post("/v1/namespaces/other/snapshots", json={"id": "x"}, headers=as_("trainer"))
    assert r.status_code == 404
    assert client.put(f"{path}/freeze", headers=as_("agent")).status_code == 403


def test_frozen_namespace_takes_ingest_but_memory_does_not_change(client: TestClient) -> None:
    path = create_namespace(client, "mem")
    seed(client, "mem", "early", 2)
    served = client.post(f"{path}/retrieve", json={"state": {"observation": "a red door"}}).json()
    before = {it["id"]: it for it in client.get(f"{path}/reflections?limit=200").json()["items"]}

    frozen = client.put(f"{path}/freeze")
    assert frozen.status_code == 200 and frozen.json()["frozen"] is True
    assert client.get(path).json()["frozen"] is True
    assert 'reflexa_namespace_frozen{namespace="mem"} 1.0' in client.get("/metrics").text

    written = post_trajectory(
        client, "mem", "during", task="open the door 0", steps=[step("a new room", "look")], success=True
    )
    assert drain(client) == 0  # its jobs wait
    r = client.post(
        f"{path}/retrieve",
        json={"state": {"observation": "a new room"}, "consistency_token": written["consistency_token"]},
    )
    assert r.status_code == 409 and r.json()["error"]["rule"] == "namespace_frozen"  # fails fast, no timeout
    r = client.post(f"{path}/retrievals/{served['retrieval_id']}/outcome", json={"success": True})
    assert r.status_code == 200 and r.json()["credited_items"] == 0
    some = next(iter(before))
    r = client.patch(f"{path}/reflections/{some}", json={"text": "edited while frozen"})
    assert r.status_code == 409 and r.json()["error"]["rule"] == "namespace_frozen"
    after = {it["id"]: it for it in client.get(f"{path}/reflections?limit=200").json()["items"]}
    assert after == before
    assert client.get(f"{path}/trajectories/during").status_code == 200  # ingest was accepted

    thawed = client.delete(f"{path}/freeze")
    assert thawed.status_code == 200 and thawed.json()["frozen"] is False
    assert drain(client) > 0  # what waited now runs
    assert len(client.get(f"{path}/reflections?limit=200").json()["items"]) > len(before)
