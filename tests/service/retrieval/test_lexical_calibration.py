"""The calibrated lexical weight: the recall set a namespace labels from its own
near-duplicate states (worked by hand), the choice among weights, and, through the
API on both engines with the real embedder, the job that records it and the
retrievals that rank with it."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from reflectors import lexical_calibration
from service.retrieval import calibration
from store import namespaces as namespaces_repo
from store.lexical import tokens
from store.models import utcnow
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

ROOMS = ["kitchen", "hall", "cellar", "attic", "garden", "study"]
COLOURS = ["red", "green", "blue", "purple", "yellow", "grey"]
DIRECTIONS = ["left", "right", "ahead", "behind"]


def grid(room: str, distance: int, direction: str, colour: str) -> str:
    return f"You are in the {room}. The key is {distance} steps {direction}. A {colour} ball lies in the corner."


def grid_states(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    keys = [(r, d, x) for r in ROOMS for d in range(10) for x in DIRECTIONS]
    return [grid(r, d, x, rng.choice(COLOURS)) for r, d, x in rng.sample(keys, n)]


def test_queries_by_hand() -> None:
    a = "a red ball in the hall"
    b = "a blue ball in the hall"  # a's near-duplicate: they differ at position 1 only
    c = "Red: one box sits in the cellar."  # another length: no near-duplicate
    queries, pairs, ambiguous = calibration.build_queries([a, b, c])
    # The paradigm is red <-> blue: a's and b's only change gives the other (stored);
    # c's "Red" becomes "Blue", the rest of its text (case, punctuation) kept, as a
    # near state an agent sends would read.
    assert pairs == 1 and ambiguous == 0
    assert [(q.text, q.source) for q in queries] == [("Blue: one box sits in the cellar.", 2)]


def test_a_query_as_near_to_another_stored_state_is_dropped() -> None:
    a = "a red ball in the hall"
    b = "a blue ball in the hall"
    c = "one red box sits in the cellar"
    e = "one blue box sits in the attic"  # c's near-duplicate at positions 1 and 5
    queries, pairs, ambiguous = calibration.build_queries([a, b, c, e])
    # c's changes (blue at 1, attic at 5) and e's (red at 1, cellar at 5) each give a
    # text one position from both c and e: four ambiguous queries, none kept.
    assert pairs == 2 and ambiguous == 4 and queries == []


def test_every_query_is_one_position_from_its_source_and_from_no_other_state() -> None:
    texts = grid_states(120)
    queries, _, _ = calibration.build_queries(texts)
    assert len(queries) >= calibration.MIN_QUERIES
    for q in queries:
        q_words = tokens(q.text)
        distances = [
            sum(x != y for x, y in zip(q_words, tokens(t), strict=True)) if len(tokens(t)) == len(q_words) else 99
            for t in texts
        ]
        assert distances[q.source] == 1 and sorted(distances)[1] >= 2


def test_queries_are_not_stored_and_look_alikes_come_first() -> None:
    texts = grid_states(60)
    queries, pairs, _ = calibration.build_queries(texts)
    assert pairs > 0 and len(queries) >= calibration.MIN_QUERIES
    assert not {q.text for q in queries} & set(texts)
    twins = {i for a, b, _ in calibration.near_pairs([tokens(t) for t in texts]) for i in (a, b)}
    sources = [q.source for q in queries]
    first_other = next((n for n, s in enumerate(sources) if s not in twins), len(sources))
    assert all(s in twins for s in sources[:first_other]) and all(s not in twins for s in sources[first_other:])


def test_the_weight_with_most_hits_wins_ties_go_nearest_the_default_then_lower() -> None:
    assert calibration.choose_weight({0.0: 3, 0.2: 9, 0.8: 8}) == 0.2
    assert calibration.choose_weight({0.2: 9, 0.6: 9, 0.9: 9}) == 0.6
    assert calibration.choose_weight({0.3: 9, 0.7: 9}) == 0.3


def test_dense_alone_cannot_tell_identical_vectors_apart_lexical_can() -> None:
    texts = grid_states(60)
    same = np.ones((len(texts), 4), np.float32) / 2.0  # every state and query encodes alike

    result = calibration.calibrate(texts, same, lambda qs: np.ones((len(qs), 4), np.float32) / 2.0)
    assert result.recall["0"] == 0.0  # all tie: a source never ranks strictly first
    assert result.recall["0.5"] == result.recall["1"] == 1.0
    assert result.weight == 0.5


def test_too_few_near_duplicates_choose_nothing() -> None:
    texts = ["a red ball in the hall", "a blue ball in the hall", "the cat sleeps"]
    result = calibration.calibrate(texts, np.eye(3, dtype=np.float32), lambda qs: np.eye(len(qs), 3, dtype=np.float32))
    assert result.weight is None and result.queries < calibration.MIN_QUERIES and result.recall == {}


def namespace(client: TestClient, ns: str) -> dict[str, Any]:
    r = client.get(f"/v1/namespaces/{ns}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def load(client: TestClient, ns: str, texts: list[str]) -> None:
    post_trajectory(client, ns, "t", steps=[step(t, "go") for t in texts], success=True)
    drain(client)


def test_a_calibrated_namespace_records_its_weight_and_ranks_with_it(client: TestClient) -> None:
    create_namespace(client, "cal")
    assert namespace(client, "cal")["settings"]["ranking"]["lexical_weight"] == "calibrated"
    texts = grid_states(60)
    load(client, "cal", texts)
    report = namespace(client, "cal")["lexical_calibration"]
    assert report["weight"] is not None and report["queries"] >= calibration.MIN_QUERIES
    assert report["states"] == len(texts) and report["calibrated_states"] == len(texts)
    assert set(report["recall_at_1"]) == {f"{w:g}" for w in calibration.WEIGHTS}
    assert report["recall_at_1"][f"{report['weight']:g}"] == max(report["recall_at_1"].values())
    # a state one word from a stored one finds it first; the exact state is first
    source = texts[0]
    near = source.replace(" ball ", " cube ")
    items = client.post("/v1/namespaces/cal/retrieve", json={"state": {"observation": near}, "k": 3}).json()["items"]
    assert items[0]["content"]["observation"] == source
    items = client.post("/v1/namespaces/cal/retrieve", json={"state": {"observation": source}, "k": 3}).json()["items"]
    assert items[0]["exact_match"] and items[0]["content"]["observation"] == source
    weight = report["weight"]
    top = items[1]  # a look-alike: its score is the blend at the calibrated weight (never credited)
    blend = (1 - weight) * top["similarity"] + weight * top["lexical_similarity"]
    assert top["score"] == pytest.approx(blend, abs=1e-3)


def test_a_fixed_weight_is_never_calibrated(client: TestClient) -> None:
    create_namespace(client, "fixed", ranking={"lexical_weight": 0.3})
    load(client, "fixed", grid_states(60))
    assert namespace(client, "fixed")["lexical_calibration"] is None


def test_it_is_checked_again_when_due_and_recalibrated_when_it_grew(client: TestClient) -> None:
    create_namespace(client, "grow")
    texts = grid_states(120)
    load(client, "grow", texts[:40])
    first = namespace(client, "grow")["lexical_calibration"]
    db = client.app.state.services.db  # type: ignore[attr-defined]

    def make_due() -> None:
        with db.write() as s:
            report = namespaces_repo.read_lexical_calibration(s, "grow")
            assert report is not None
            due = {**report, "next_check_at": (utcnow() - timedelta(seconds=1)).isoformat()}
            namespaces_repo.update_lexical_calibration(s, "grow", None, due)

    # not due: a closed episode queues nothing
    post_trajectory(client, "grow", "t2", steps=[step(texts[40], "go")], success=True)
    drain(client)
    assert namespace(client, "grow")["lexical_calibration"]["checked_at"] == first["checked_at"]
    # due, but grown by less than GROWTH: checked, not recalibrated
    make_due()
    post_trajectory(client, "grow", "t3", steps=[step(texts[41], "go")], success=True)
    drain(client)
    second = namespace(client, "grow")["lexical_calibration"]
    assert second["checked_at"] != first["checked_at"] and second["calibrated_at"] == first["calibrated_at"]
    # due and grown: recalibrated on the larger store
    make_due()
    post_trajectory(client, "grow", "t4", steps=[step(t, "go") for t in texts[42:]], success=True)
    drain(client)
    third = namespace(client, "grow")["lexical_calibration"]
    assert third["calibrated_states"] == len(texts) and third["calibrated_at"] != first["calibrated_at"]
    assert len(texts) >= lexical_calibration.GROWTH * 42


def test_a_snapshot_ranks_with_the_weight_calibrated_when_it_was_taken(client: TestClient) -> None:
    create_namespace(client, "snap")
    texts = grid_states(60)
    load(client, "snap", texts)
    services = client.app.state.services  # type: ignore[attr-defined]
    taken = namespace(client, "snap")["lexical_calibration"]["weight"]
    assert client.post("/v1/namespaces/snap/snapshots", json={"id": "s"}).status_code == 201
    later = 0.9 if taken != 0.9 else 0.1
    with services.db.write() as s:  # a later calibration chose another weight
        report = namespaces_repo.read_lexical_calibration(s, "snap")
        namespaces_repo.update_lexical_calibration(s, "snap", later, {**report, "weight": later})
    services.namespaces.outcomes_changed("snap")  # this process's cached ranking inputs

    def top_look_alike(**extra: Any) -> tuple[float, dict[str, Any]]:
        body = {"state": {"observation": texts[0]}, "k": 3, **extra}
        r = client.post("/v1/namespaces/snap/retrieve", json=body)
        assert r.status_code == 200, r.text
        item = r.json()["items"][1]
        return item["score"], item

    for weight, extra in ((taken, {"snapshot": "s"}), (later, {})):
        score, item = top_look_alike(**extra)
        blend = (1 - weight) * item["similarity"] + weight * item["lexical_similarity"]
        assert score == pytest.approx(blend, abs=1e-3), (weight, extra)
