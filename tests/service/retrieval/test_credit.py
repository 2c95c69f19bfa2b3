"""Outcome credit is bounded when an outcome names no items: only the top
`credit.unnamed_top_k` served ranks are credited, by a reported outcome and by an
episode closing over its retrievals, on both engines (docs/retrieval.md)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

ROOMS = [f"Room {n}: a corridor with {n} doors and a lamp." for n in range(6)]


def served(api: TestClient, ns: str, **extra: Any) -> dict[str, Any]:
    r = api.post(f"/v1/namespaces/{ns}/retrieve", json={"state": {"observation": ROOMS[0]}, "k": 6, **extra})
    assert r.status_code == 200, r.text
    assert len(r.json()["items"]) == 6
    return r.json()


def uses_by_rank(api: TestClient, ns: str, out: dict[str, Any]) -> list[int]:
    uses = {}
    for item in out["items"]:
        r = api.get(f"/v1/namespaces/{ns}/reflections/{item['id']}")
        uses[item["id"]] = r.json()["utility"]["uses"]
    return [uses[i["id"]] for i in out["items"]]


def fill(api: TestClient, ns: str, **settings: Any) -> None:
    create_namespace(api, ns, **settings)
    post_trajectory(api, ns, "t", task="walk", steps=[step(o, f"go {i}") for i, o in enumerate(ROOMS)], success=True)
    drain(api)


def test_an_outcome_naming_no_items_credits_the_top_ranks(client: TestClient) -> None:
    fill(client, "c")
    out = served(client, "c")
    r = client.post(f"/v1/namespaces/c/retrievals/{out['retrieval_id']}/outcome", json={"success": True})
    assert r.json()["credited_items"] == 3
    assert uses_by_rank(client, "c", out) == [1, 1, 1, 0, 0, 0]
    # Naming items credits exactly those, wherever they ranked.
    out = served(client, "c")
    named = [out["items"][5]["id"]]
    r = client.post(
        f"/v1/namespaces/c/retrievals/{out['retrieval_id']}/outcome", json={"success": False, "item_ids": named}
    )
    assert r.json()["credited_items"] == 1


def test_an_episode_closing_credits_the_top_ranks_of_its_retrievals(client: TestClient) -> None:
    fill(client, "e")
    post_trajectory(client, "e", "ep", task="walk", steps=[step("x", "y")])
    out = served(client, "e", trajectory_id="ep")
    before = uses_by_rank(client, "e", out)
    r = client.post("/v1/namespaces/e/trajectories/ep/outcome", json={"success": True})
    assert r.status_code == 200
    after = uses_by_rank(client, "e", out)
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 0, 0, 0]


def test_zero_credits_every_served_item(client: TestClient) -> None:
    fill(client, "all", credit={"unnamed_top_k": 0})
    out = served(client, "all")
    r = client.post(f"/v1/namespaces/all/retrievals/{out['retrieval_id']}/outcome", json={"success": True})
    assert r.json()["credited_items"] == 6
