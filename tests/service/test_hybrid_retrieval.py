"""Hybrid retrieval through the API on both engines: each served item carries its
lexical similarity (word overlap of the state texts, numbers included), the rank
blends it with the dense cosine by ranking.lexical_weight, and `reflexa reindex`
rebuilds the lexical index from SQL."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from reflectors.reindex import reindex
from store.models import LexicalText
from tests.fixtures import create_namespace, drain, post_trajectory, step

DOOR2 = "You are at the door. 2 steps left."
DOOR12 = "You are at the door. 12 steps left."
WINDOW = "You are at the window. A cat sleeps."
QUERY = "You are at the door. 20 steps left."


def retrieve(api: TestClient, ns: str, obs: str, **extra: Any) -> list[dict[str, Any]]:
    r = api.post(f"/v1/namespaces/{ns}/retrieve", json={"state": {"observation": obs}, "k": 5, **extra})
    assert r.status_code == 200, r.text
    return r.json()["items"]  # type: ignore[no-any-return]


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "h")
    steps = [step(DOOR2, "open"), step(DOOR12, "wait"), step(WINDOW, "pet the cat")]
    post_trajectory(client, "h", "t", steps=steps, success=True)
    drain(client)
    return client


def test_items_carry_their_lexical_similarity_and_the_rank_blends_it(api: TestClient) -> None:
    items = {i["content"]["observation"]: i for i in retrieve(api, "h", QUERY)}
    # query words {you, are, at, the, door, 20, steps, left}; DOOR2 shares 7 of its 8
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(7 / 8)
    assert items[WINDOW]["lexical_similarity"] == pytest.approx(4 / math.sqrt(8 * 8))  # you are at the
    band, w = 0.05, 0.3
    for item in items.values():  # never credited, just written: the score is the relevance
        relevance = (1 - w) * item["similarity"] + w * item["lexical_similarity"]
        assert item["score"] == pytest.approx(relevance, abs=band * 0.01)
        assert not item["exact_match"]


def test_lexical_weight_zero_ranks_by_the_dense_cosine_alone(client: TestClient) -> None:
    create_namespace(client, "d", ranking={"lexical_weight": 0.0})
    post_trajectory(client, "d", "t", steps=[step(DOOR2, "open"), step(WINDOW, "pet")], success=True)
    drain(client)
    for item in retrieve(client, "d", QUERY):
        assert item["lexical_similarity"] is None and item["score"] == pytest.approx(item["similarity"], abs=1e-3)


def test_reindex_rebuilds_the_lexical_index(api: TestClient) -> None:
    services = api.app.state.services  # type: ignore[attr-defined]
    with services.db.write() as s:
        s.execute(delete(LexicalText))
    assert all(i["lexical_similarity"] is None for i in retrieve(api, "h", QUERY))
    reindex(services.db, services.embedder, services.registry, ["h"])
    items = {i["content"]["observation"]: i for i in retrieve(api, "h", QUERY)}
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(7 / 8)
