"""POST …/retrieve/batch: each state gets exactly the answer a single retrieve gives
it (same items, order, scores), with its own filters, k and retrieval id; one
encoder call for the batch; limits and consistency tokens, on both engines."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

NS = "/v1/namespaces/b"
ROOMS = [
    "You are in the kitchen. A kettle sits on the stove.",
    "You are in the garden. Roses grow by the fence.",
    "You are in the cellar. Barrels line the walls.",
    "You are in the attic. Dust covers an old trunk.",
]
REQUESTS: list[dict[str, Any]] = [
    {"state": {"observation": ROOMS[0]}, "k": 3},
    {"state": {"observation": ROOMS[1]}, "k": 1, "environment": "house"},
    {"state": {"observation": ROOMS[2]}, "k": 5, "filters": {"exclude_tasks": ["chores"]}},
    {"state": {"observation": ROOMS[3]}, "k": 2, "kinds": ["exemplar"], "internal_state": "find the trunk"},
    {"state": {"observation": ROOMS[0]}, "k": 4, "mmr_lambda": 0.5, "render": {"format": "text", "max_chars": 500}},
    # the citation filters, applied in Python to rows a batch fetches once
    {"state": {"observation": ROOMS[1]}, "k": 5, "filters": {"agent": "bot"}},
    {"state": {"observation": ROOMS[1]}, "k": 5, "filters": {"policy_version": "p2"}},
    {"state": {"observation": ROOMS[0]}, "k": 5, "filters": {"exclude_trajectory_ids": ["t1"]}},
    {"state": {"observation": ROOMS[0]}, "k": 5, "filters": {"exclude_tasks": ["errands"], "agent": "bot"}},
    {"state": {"observation": ROOMS[2]}, "k": 5, "filters": {"status": ["active", "candidate"]}},
]


def seed(client: TestClient) -> list[dict[str, Any]]:
    """Namespace b: t1 and t2 over the rooms, reflected; returns the rooms' steps."""
    create_namespace(client, "b")
    steps = [
        step(room, f"look {i}", internal_state="find the trunk" if i == 3 else None) for i, room in enumerate(ROOMS)
    ]
    post_trajectory(client, "b", "t1", task="chores", environment="house", agent="bot", steps=steps, success=True)
    post_trajectory(
        client, "b", "t2", task="errands", environment="yard", policy_version="p2", steps=steps[:2], success=False
    )
    drain(client)
    return steps


@pytest.fixture
def api(client: TestClient) -> TestClient:
    seed(client)
    return client


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "items": [(i["id"], i["exact_match"]) for i in result["items"]],
        "context": result["context"],
        "gamma": result["gamma"],
    }


def test_each_state_gets_the_answer_a_single_retrieve_gives_it(api: TestClient) -> None:
    singles = []
    for body in REQUESTS:
        r = api.post(f"{NS}/retrieve", json=body)
        assert r.status_code == 200, r.text
        singles.append(r.json())
    r = api.post(f"{NS}/retrieve/batch", json={"requests": REQUESTS})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [comparable(x) for x in results] == [comparable(x) for x in singles]
    # the same scores, up to the recency that decays between the two calls (~1e-9)
    assert [[i["score"] for i in x["items"]] for x in results] == [
        pytest.approx([i["score"] for i in x["items"]], abs=1e-6) for x in singles
    ]
    ids = [x["retrieval_id"] for x in results]
    assert len(set(ids)) == len(ids) and not set(ids) & {x["retrieval_id"] for x in singles}
    assert results[2]["items"] == [] or all(i["environment"] != "house" for i in results[2]["items"])
    assert results[5]["items"] and results[6]["items"]  # the filters kept something, and
    assert {i["id"] for i in results[5]["items"]} != {i["id"] for i in results[6]["items"]}  # not the same
    # Every retrieval id was logged: each can be credited on its own.
    for rid in ids:
        out = api.post(f"{NS}/retrievals/{rid}/outcome", json={"success": True})
        assert out.status_code == 200, out.text


def test_the_batch_is_one_encoder_call(api: TestClient) -> None:
    embedder = api.app.state.services.retrieval.embedder  # type: ignore[attr-defined]
    calls: list[int] = []
    original = embedder.encode

    def counting(texts: list[str]) -> Any:
        calls.append(len(texts))
        return original(texts)

    embedder.encode = counting
    try:
        r = api.post(f"{NS}/retrieve/batch", json={"requests": REQUESTS})
    finally:
        embedder.encode = original
    assert r.status_code == 200
    assert calls == [len(REQUESTS) + 1]  # every state text and the one internal state, in one call


def test_batch_limits_and_errors_name_the_request(database_url: str, tmp_path: Any) -> None:
    settings = make_settings(database_url, tmp_path, limits={"max_batch_retrievals": 2})
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        create_namespace(api, "b")
        r = api.post(f"{NS}/retrieve/batch", json={"requests": REQUESTS[:3]})
        assert r.status_code == 422
        assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == ("requests", "max_batch")
        r = api.post(f"{NS}/retrieve/batch", json={"requests": []})
        assert r.status_code == 422 and r.json()["error"]["field"] == "requests"
        bad = [REQUESTS[0], {"state": {"observation": "o"}, "consistency_token": "nope"}]
        r = api.post(f"{NS}/retrieve/batch", json={"requests": bad})
        assert r.status_code == 422
        assert r.json()["error"]["field"] == "requests[1].consistency_token"
        r = api.post(f"{NS}/retrieve/batch", json={"requests": [{"state": {"observation": "o"}, "k": 0}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "requests[0].k"


def test_a_token_in_a_batch_waits_for_its_write(api: TestClient) -> None:
    written = post_trajectory(
        api, "b", "t3", task="chores", steps=[step("A new room with a piano.", "play")], success=True
    )
    drain(api)
    body = {
        "requests": [
            {"state": {"observation": "A new room with a piano."}, "consistency_token": written["consistency_token"]}
        ]
    }
    r = api.post(f"{NS}/retrieve/batch", json=body)
    assert r.status_code == 200
    first = r.json()["results"][0]["items"][0]
    assert first["exact_match"] and first["content"]["action"] == "play"
