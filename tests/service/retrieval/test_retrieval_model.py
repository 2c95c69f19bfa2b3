"""Retrieval with the real packaged model (all-MiniLM-L6-v2 on ONNX Runtime):
the state-matched exemplar comes before unrelated ones, and the agent's internal
state moves the ranking when the environment states tie."""

from __future__ import annotations

import os
from typing import Any

import pytest
from fastapi.testclient import TestClient

from store.database import Database
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def api(api_onnx: TestClient) -> TestClient:
    create_namespace(api_onnx, "real")
    return api_onnx


STATES = [
    ("You are in a kitchen. There is a fridge, a stove and a kettle on the counter.", "take kettle"),
    ("You are in a bedroom. A bed, a wardrobe and a lamp on a nightstand.", "open wardrobe"),
    ("You are on a street. Cars pass by and a bus stop is to your left.", "wait at bus stop"),
    ("Checkout page: enter your credit card number and billing address.", "fill card number"),
    ("A red ball is two steps ahead of you; a grey wall is to your right.", "move forward"),
]


def _ingest(api: TestClient, steps: list[dict[str, Any]], id: str) -> None:
    post_trajectory(api, "real", id, task="explore", environment="mixed", steps=steps, success=True)
    drain(api)


def test_state_matched_exemplar_first(api: TestClient) -> None:
    _ingest(api, [step(o, a) for o, a in STATES], "mixed")
    queries = {
        "In the kitchen you see a kettle, a stove and a fridge.": "take kettle",
        "Please type the card number and your billing address to pay.": "fill card number",
        "There is a red ball in front of you and a wall on the right.": "move forward",
        "You stand next to a bus stop on a busy road.": "wait at bus stop",
    }
    for query, expected in queries.items():
        r = api.post("/v1/namespaces/real/retrieve", json={"state": {"observation": query}, "k": 5})
        items = r.json()["items"]
        assert items[0]["content"]["action"] == expected, (
            query,
            [(i["content"]["action"], i["similarity"], i["score"]) for i in items],
        )
        assert items[0]["similarity"] > items[1]["similarity"] + 0.1


def test_internal_state_breaks_ties_between_equal_states(api: TestClient) -> None:
    room = "You are in a hallway with two doors: a blue door to the north and a green door to the east."
    _ingest(
        api,
        [
            step(room, "go north", internal_state="find the library to return a book"),
            step(room + " ", "go east", internal_state="get to the garden to water plants"),
        ],
        "hall",
    )

    def top(goal: str) -> str:
        body = {"state": {"observation": room}, "internal_state": goal, "k": 2}
        return api.post("/v1/namespaces/real/retrieve", json=body).json()["items"][0]["content"]["action"]

    assert top("I need to water the plants outside in the garden") == "go east"
    assert top("return the borrowed book to the library") == "go north"


def test_vectors_are_stored_for_rebuilds(api: TestClient, database_url: str) -> None:
    _ingest(api, [step(*STATES[0])], "one")
    db = Database(database_url)
    from sqlalchemy import select

    from store.models import Embedding

    with db.read() as s:
        rows = s.execute(select(Embedding.model, Embedding.dim, Embedding.field)).all()
    db.dispose()
    assert rows == [("all-MiniLM-L6-v2", 384, "state")]
