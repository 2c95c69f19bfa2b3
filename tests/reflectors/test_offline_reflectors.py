"""The offline reflectors end to end (SQLite and PostgreSQL, model-free embedder):
contrastive heuristics from (state neighbourhood, action) statistics, and evidence
cards per task from the latest rollout groups."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from reflectors.contrastive import neighbourhoods, wilson_lower
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

NS = "/v1/namespaces/off"
EDGE = "You stand at the edge of a steep cliff. The river roars far below. Wind from the {}."


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "off")
    return client


def episode(api: TestClient, id: str, steps: list[dict[str, Any]], success: bool, **fields: Any) -> None:
    body = {"task": "cross the valley", "environment": "valley", "steps": steps, "success": success, **fields}
    post_trajectory(api, "off", id, **body)


def heuristics(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    return api.get(f"{NS}/reflections", params={"kind": "heuristic", **params}).json()["items"]


def test_wilson_and_clustering_basics() -> None:
    assert wilson_lower(0, 0) == 0.0
    assert wilson_lower(9, 11) == pytest.approx(0.523, abs=0.01)
    assert wilson_lower(5, 5) > wilson_lower(3, 3)
    import numpy as np

    v = np.array([[1, 0], [0.99, 0.14], [0, 1]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert neighbourhoods(v, 0.9) == [[0, 1], [2]]


def test_contrastive_heuristics_from_outcomes(api: TestClient) -> None:
    winds = ["north", "south", "east", "west", "north-east", "south-west", "north-west"]
    for i, wind in enumerate(winds):
        episode(api, f"jump{i}", [step(EDGE.format(wind), "jump", caused_failure=True)], success=False)
        episode(api, f"climb{i}", [step(EDGE.format(wind), "climb down the rope")], success=True)
    drain(api)
    found = {h["content"]["polarity"]: h for h in heuristics(api)}
    avoid, prefer = found["avoid"], found["prefer"]
    assert avoid["content"]["action"] == "jump" and avoid["content"]["support"] == {
        "successes": 0,
        "failures": 7,
        "attempts": 7,
    }
    assert avoid["status"] == "active" and avoid["reflector"] == "contrastive"
    assert "7 of 7 attempts failed" in avoid["text"] and avoid["content"]["confidence"] == pytest.approx(
        wilson_lower(7, 7), abs=1e-3
    )
    assert prefer["content"]["action"] == "climb down the rope"
    assert {e["trajectory_id"] for e in avoid["evidence"]} <= {f"jump{i}" for i in range(7)}
    assert avoid["evidence_count"] == 7
    # Its vector is a centroid of states, no text's: a reindex gives it no text hash and
    # no lexical text (an LLM heuristic's it does).
    from reflectors.reindex import reindex
    from store.models import Embedding, LexicalText, Reflection

    services = api.app.state.services  # type: ignore[attr-defined]
    reindex(services.db, services.embedder, services.registry, ["off"])
    with services.db.read() as session:
        pk = session.query(Reflection.pk).filter(Reflection.id == avoid["id"]).scalar()
        assert session.get(LexicalText, pk) is None
        assert [h for (h,) in session.query(Embedding.text_hash).filter(Embedding.reflection_pk == pk)] == [None]
    # Served in such a state, next to the exemplars.
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": EDGE.format("east")}, "kinds": ["heuristic"]})
    assert {i["content"]["action"] for i in r.json()["items"]} == {"jump", "climb down the rope"}

    # More evidence revises the same heuristics in place (no duplicates)...
    episode(api, "jump-more", [step(EDGE.format("south-east"), "jump", caused_failure=True)], success=False)
    drain(api)
    again = heuristics(api)
    assert len(again) == 2
    avoid2 = next(h for h in again if h["content"]["polarity"] == "avoid")
    assert avoid2["id"] == avoid["id"] and avoid2["version"] == 2 and avoid2["content"]["support"]["failures"] == 8
    # ...and when jumping starts to work, "avoid jump" stops being served.
    for i, wind in enumerate(winds * 3):
        episode(api, f"ok-jump{i}", [step(EDGE.format(wind), "jump")], success=True)
    drain(api)
    assert api.get(f"{NS}/reflections/{avoid['id']}").json()["status"] == "candidate"
    history = api.get(f"{NS}/reflections/{avoid['id']}/history").json()
    assert history[-1]["note"] == "the evidence no longer supports it"


def test_small_samples_make_no_heuristic(api: TestClient) -> None:
    for i in range(3):
        episode(api, f"j{i}", [step(EDGE.format("north"), "jump", caused_failure=True)], success=False)
    drain(api)
    assert heuristics(api) == []


def steps(*actions: str, fail_at: int | None = None) -> list[dict[str, Any]]:
    return [
        step(f"Room {i}: a locked door and a window.", a, caused_failure=i == fail_at) for i, a in enumerate(actions)
    ]


def test_evidence_card_per_task_follows_the_latest_groups(api: TestClient) -> None:
    def group(g: str, wins: int, losses: int) -> None:
        for i in range(wins):
            episode(api, f"{g}-w{i}", steps("search desk", "take key", "open door"), True, task="escape", group_id=g)
        for i in range(losses):
            episode(
                api,
                f"{g}-l{i}",
                steps("search desk", "break window", fail_at=1),
                False,
                task="escape",
                group_id=g,
                outcome={"success": False, "failure_reason": "cut by glass"},
            )

    group("g1", 2, 2)
    drain(api)
    [card] = api.get(f"{NS}/reflections", params={"kind": "evidence_card"}).json()["items"]
    c = card["content"]
    assert (c["task"], c["rollouts"], c["successes"], c["groups"]) == ("escape", 4, 2, ["g1"])
    assert [w["action"] for w in c["worked"]][:2] == ["open door", "take key"]
    assert c["failed"][0] == {"action": "break window", "in_successful": 0, "in_failed": 2}
    assert c["failure_causes"][0]["action"] == "break window" and c["failure_causes"][0]["count"] == 2
    assert c["failure_reasons"] == [{"reason": "cut by glass", "count": 2}]
    assert c["best_rollout"]["actions"] == ["search desk", "take key", "open door"]
    assert "Worked: 'open door'" in card["text"]
    # Found by task.
    r = api.post(
        f"{NS}/retrieve", json={"state": {"observation": "anything"}, "task": "escape", "kinds": ["evidence_card"]}
    )
    assert [i["id"] for i in r.json()["items"]] == [card["id"]]
    # Newer groups replace the old ones: the card follows the policy.
    for g in ("g2", "g3", "g4"):
        group(g, 3, 0)
        drain(api)
    [card] = api.get(f"{NS}/reflections", params={"kind": "evidence_card"}).json()["items"]
    assert card["content"]["groups"] == ["g2", "g3", "g4"] and card["content"]["successes"] == 9
    assert card["evidence_count"] == 9 and card["version"] > 1
    assert len(api.get(f"{NS}/reflections/{card['id']}/history").json()) == card["version"]
