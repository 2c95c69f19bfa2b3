"""Hybrid retrieval through the API on both engines: each served item carries its
lexical similarity (TF-IDF cosine of the state texts' words, numbers included,
document frequencies over the candidates), the rank
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


def tfidf_cosine(query: set[str], item: set[str], candidates: list[set[str]]) -> float:
    """By hand: idf(w) = ln((1 + n) / (1 + df(w))) + 1 over the n candidate texts."""
    n = len(candidates)

    def idf(w: str) -> float:
        return math.log((1 + n) / (1 + sum(w in c for c in candidates))) + 1

    def norm(words: set[str]) -> float:
        return math.sqrt(sum(idf(w) ** 2 for w in words))

    return sum(idf(w) ** 2 for w in query & item) / (norm(query) * norm(item))


def test_items_carry_their_lexical_similarity_and_the_rank_blends_it(api: TestClient) -> None:
    items = {i["content"]["observation"]: i for i in retrieve(api, "h", QUERY)}
    words = {text: set(text.lower().replace(".", "").split()) for text in (DOOR2, DOOR12, WINDOW, QUERY)}
    pool = [words[DOOR2], words[DOOR12], words[WINDOW]]
    # DOOR2 shares 7 of 8 words, but "20" (in no candidate) weighs most: ln(4/1) + 1 = 2.386
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(tfidf_cosine(words[QUERY], words[DOOR2], pool))
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(0.681, abs=1e-3)
    assert items[WINDOW]["lexical_similarity"] == pytest.approx(tfidf_cosine(words[QUERY], words[WINDOW], pool))
    assert items[DOOR2]["lexical_similarity"] > items[WINDOW]["lexical_similarity"]
    band, w = 0.05, 0.2  # the defaults
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
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(0.681, abs=1e-3)
