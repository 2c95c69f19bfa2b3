"""Hybrid retrieval through the API on both engines: each served item carries its
lexical similarity (a √idf-weighted cosine of the state texts' words and word
pairs one or two apart, numbers included, document frequencies over the candidates), the rank
blends it with the dense cosine by ranking.lexical_weight, and `reflexa reindex`
rebuilds the lexical index from SQL."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from reflectors.reindex import reindex
from service.retrieval import repository as retrieval_repo
from store import lexical
from store.models import LexicalText
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

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


def features(text: str) -> set[str]:
    """By hand: the words and the ordered pairs of words one or two apart."""
    words = text.lower().replace(".", "").split()
    near = [(words[i], words[j]) for i in range(len(words)) for j in (i + 1, i + 2) if j < len(words)]
    return set(words) | {f"{a} {b}" for a, b in near}


def lexical_cosine(query: set[str], item: set[str], candidates: list[set[str]]) -> float:
    """By hand: idf(f) = ln((1 + n) / (1 + df(f))) + 1 over the n candidate texts,
    each feature weighted √idf: Σ_shared idf / √(Σ_query idf · Σ_item idf)."""
    n = len(candidates)

    def idf(f: str) -> float:
        return math.log((1 + n) / (1 + sum(f in c for c in candidates))) + 1

    return sum(idf(f) for f in query & item) / math.sqrt(sum(map(idf, query)) * sum(map(idf, item)))


def test_items_carry_their_lexical_similarity_and_the_rank_blends_it(api: TestClient) -> None:
    items = {i["content"]["observation"]: i for i in retrieve(api, "h", QUERY)}
    feats = {text: features(text) for text in (DOOR2, DOOR12, WINDOW, QUERY)}
    pool = [feats[DOOR2], feats[DOOR12], feats[WINDOW]]
    # DOOR2 shares 16 of 21 features, but the five it lacks ("20", "door 20", "20 steps",
    # "the 20", "20 left": in no candidate) weigh most: ln(4/1) + 1 = 2.386 each
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(lexical_cosine(feats[QUERY], feats[DOOR2], pool))
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(0.640, abs=1e-3)
    assert items[WINDOW]["lexical_similarity"] == pytest.approx(lexical_cosine(feats[QUERY], feats[WINDOW], pool))
    assert items[DOOR2]["lexical_similarity"] > items[WINDOW]["lexical_similarity"]
    band, w = 0.05, 0.5  # the defaults
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
    assert items[DOOR2]["lexical_similarity"] == pytest.approx(0.640, abs=1e-3)


def test_a_candidates_keys_are_read_as_stored_and_made_from_its_text_without_them(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stores each lexical text's feature keys beside it, and ranking reads
    them instead of keying the text; a row without them (written before migration
    0019) is keyed from its text, to the same similarities to the bit."""
    services = api.app.state.services  # type: ignore[attr-defined]
    with services.db.read() as s:
        stored = s.execute(select(LexicalText.text, LexicalText.keys)).all()
    assert len(stored) == 3 and all(keys == lexical.keys_blob(lexical.text_keys(t)) for t, keys in stored)

    def never(text: str) -> None:
        raise AssertionError(f"keyed a stored text: {text!r}")

    def ranked(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:  # (the score's recency moves with the clock)
        return [(i["id"], i["lexical_similarity"], i["similarity"]) for i in items]

    with monkeypatch.context() as patched:
        patched.setattr(retrieval_repo, "text_keys", never)
        served = ranked(retrieve(api, "h", QUERY))
    with services.db.write() as s:
        s.execute(update(LexicalText).values(keys=None))
    keyed: list[str] = []
    monkeypatch.setattr(retrieval_repo, "text_keys", lambda text: keyed.append(text) or lexical.text_keys(text))
    assert ranked(retrieve(api, "h", QUERY)) == served
    assert sorted(keyed) == sorted(t for t, _ in stored)
