"""Interventional utility (`credit.holdout_rate`): items withheld at random from a
share of the episodes that would have been served them, and the causal effect of
each estimated from the outcomes with and without it (service/retrieval/holdout.py,
docs/retrieval.md "Causal effect of a memory"), on both engines."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from service.retrieval.holdout import Arm, estimate, withheld
from store.database import Database
from store.models import RetrievalHoldout
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

ROOMS = [f"Room {n}: a corridor with {n} doors and a lamp." for n in range(6)]
QUERY = {"observation": "a corridor with doors and a lamp"}  # near every room, exactly none


def fill(api: TestClient, ns: str, rate: float, **settings: Any) -> None:
    create_namespace(api, ns, credit={"holdout_rate": rate}, **settings)
    post_trajectory(api, ns, "t", task="walk", steps=[step(o, f"go {i}") for i, o in enumerate(ROOMS)], success=True)
    drain(api)


def retrieve(api: TestClient, ns: str, **extra: Any) -> dict[str, Any]:
    r = api.post(f"/v1/namespaces/{ns}/retrieve", json={"state": QUERY, "k": 3, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def effect(api: TestClient, ns: str, item_id: str) -> dict[str, Any]:
    r = api.get(f"/v1/namespaces/{ns}/reflections/{item_id}/effect")
    assert r.status_code == 200, r.text
    return r.json()


def holdout_rows(settings: Any) -> list[tuple[int, bool, str]]:
    db = Database(settings.database_url)
    try:
        with db.read() as session:
            return [
                (h.reflection_pk, h.withheld, h.unit)
                for h in session.query(RetrievalHoldout).order_by(RetrievalHoldout.pk)
            ]
    finally:
        db.dispose()


def test_a_simulated_agent_recovers_the_sign_of_each_items_true_effect(client: TestClient, settings: Any) -> None:
    """Three of the items served first change the success chance of an episode by a
    known amount (+0.4, -0.4, 0) when served; after 360 episodes with a holdout of
    0.3, the helpful one's interval lies above zero, the harmful one's below, the
    neutral one's straddles it, and the withheld share is the setting's.

    The estimand is the effect of serving an item rather than what takes its place.
    Utility is kept out of the ranking here so that the three stay on top and what
    replaces a withheld one is always a neutral filler: with utility in the ranking
    the harmful item sinks to fourth and becomes the filler, and withholding the
    neutral one then (truly) hurts."""
    fill(client, "sim", 0.3, ranking={"utility_weight": 0.0})
    assert client.post("/v1/namespaces/sim/snapshots", json={"id": "before"}).status_code == 201
    top = [i["id"] for i in retrieve(client, "sim", snapshot="before")["items"]]  # a snapshot draws nothing
    true_effect = {top[0]: 0.4, top[1]: -0.4, top[2]: 0.0}
    rng = random.Random(7)
    for episode in range(360):
        # Two retrievals per episode: both withhold the same items (the episode is the unit).
        outs = [retrieve(client, "sim", trajectory_id=f"ep{episode}") for _ in range(2)]
        served = {i["id"] for out in outs for i in out["items"]}
        assert [sorted(i["id"] for i in o["items"]) for o in outs[1:]] == [sorted(i["id"] for i in outs[0]["items"])]
        p = 0.5 + sum(e for item, e in true_effect.items() if item in served)
        success = rng.random() < p
        for out in outs:
            r = client.post(f"/v1/namespaces/sim/retrievals/{out['retrieval_id']}/outcome", json={"success": success})
            assert r.status_code == 200, r.text

    helpful, harmful, neutral = (effect(client, "sim", item) for item in top)
    assert helpful["verdict"] == "helps" and helpful["low"] > 0, helpful
    assert harmful["verdict"] == "hurts" and harmful["high"] < 0, harmful
    assert neutral["verdict"] == "unclear" and neutral["low"] < 0 < neutral["high"], neutral
    for e in (helpful, harmful, neutral):
        assert e["withheld"]["units"] > 30 and e["served"]["units"] > 100  # episodes, not retrievals
        assert e["holdout_rate"] == 0.3

    rows = holdout_rows(settings)
    assert rows and {unit for _, _, unit in rows} <= {f"ep{n}" for n in range(360)}
    share = sum(w for _, w, _ in rows) / len(rows)
    assert abs(share - 0.3) < 0.05, share  # ~1,000 draws: the binomial sd is 0.015


def test_withheld_items_are_replaced_and_never_served_to_their_episode(client: TestClient, settings: Any) -> None:
    fill(client, "swap", 0.5)
    total = len(client.get("/v1/namespaces/swap/reflections").json()["items"])
    sizes = {f"e{n}": len(retrieve(client, "swap", trajectory_id=f"e{n}")["items"]) for n in range(20)}
    rows = holdout_rows(settings)
    by_unit: dict[str, set[int]] = {unit: set() for unit in sizes}
    for pk, was_withheld, unit in rows:
        if was_withheld:
            by_unit[unit].add(pk)
    assert any(by_unit.values()), "a rate of 0.5 over 20 episodes withholds something"
    # What was withheld was replaced by the next best, while any was left.
    assert sizes == {unit: min(3, total - len(pks)) for unit, pks in by_unit.items()}
    served_pks = {(unit, pk) for pk, w, unit in rows if not w}
    assert not any((unit, pk) in served_pks for unit, pks in by_unit.items() for pk in pks)


def test_an_exact_match_is_never_withheld(client: TestClient, settings: Any) -> None:
    fill(client, "exact", 0.5)
    firsts = set()
    for episode in range(30):
        first = retrieve(client, "exact", state={"observation": ROOMS[2]}, trajectory_id=f"x{episode}")["items"][0]
        assert first["exact_match"]
        firsts.add(first["id"])
    (exact_id,) = firsts
    drawn = {pk for pk, _, _ in holdout_rows(settings)}
    assert drawn  # the others were put to the draw
    assert effect(client, "exact", exact_id)["served"]["units"] == 0  # not even in the served arm


def test_off_by_default_and_never_under_a_snapshot(client: TestClient, settings: Any) -> None:
    create_namespace(client, "off")
    post_trajectory(client, "off", "t", task="walk", steps=[step(o, f"go {i}") for i, o in enumerate(ROOMS)])
    drain(client)
    for episode in range(10):
        retrieve(client, "off", trajectory_id=f"s{episode}")
    assert holdout_rows(settings) == []
    fill(client, "snap", 0.5)
    assert client.post("/v1/namespaces/snap/snapshots", json={"id": "pin"}).status_code == 201
    pinned = [retrieve(client, "snap", snapshot="pin", trajectory_id=f"p{n}") for n in range(10)]
    assert all(p == pinned[0] for p in pinned)  # the same bytes every time: nothing withheld
    assert pinned[0]["retrieval_id"] is None
    assert holdout_rows(settings) == []


@pytest.mark.parametrize("rate", [-0.1, 0.51])
def test_a_rate_outside_0_to_half_is_refused_naming_the_setting(client: TestClient, rate: float) -> None:
    r = client.post("/v1/namespaces", json={"name": "bad", "settings": {"credit": {"holdout_rate": rate}}})
    assert r.status_code == 422
    assert "holdout_rate" in r.text


def test_the_effect_of_an_unknown_item_is_a_404(client: TestClient) -> None:
    fill(client, "nf", 0.1)
    r = client.get("/v1/namespaces/nf/reflections/nope/effect")
    assert r.status_code == 404


# -- the estimator, by hand and by properties ---------------------------------


def test_the_estimate_matches_hand_computation() -> None:
    # served 8 of 10, withheld 2 of 10, baseline 0.5, prior strength 2:
    # p1 = (8 + 1) / 12 = 0.75, p0 = (2 + 1) / 12 = 0.25, var = 0.75 * 0.25 / 13 each
    e = estimate(Arm(10, 8), Arm(10, 2), 0.5)
    half = 1.959963984540054 * math.sqrt(2 * 0.75 * 0.25 / 13)
    assert e.effect == pytest.approx(0.5)
    assert (e.low, e.high) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert round(e.low, 4) == 0.1671 and e.verdict == "helps"


def test_no_support_means_no_effect() -> None:
    e = estimate(Arm(0, 0), Arm(0, 0), 0.3)
    assert e.effect == 0.0 and e.low < 0 < e.high and e.verdict == "unclear"


counts = st.integers(0, 500).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))


@given(counts, counts, st.floats(0.01, 0.99))
def test_swapping_the_arms_negates_the_effect(served: tuple[int, int], held: tuple[int, int], b: float) -> None:
    e, f = estimate(Arm(*served), Arm(*held), b), estimate(Arm(*held), Arm(*served), b)
    assert e.effect == pytest.approx(-f.effect, abs=1e-12)
    assert -1.0 <= e.low <= e.effect <= e.high <= 1.0


@given(st.integers(1, 200), st.floats(0.05, 0.95), st.floats(0.05, 0.95))
def test_the_same_rates_with_more_support_narrow_and_grow_the_estimate(n: int, p1: float, p0: float) -> None:
    """The shrinkage toward zero fades and the interval narrows as support grows."""
    small = estimate(Arm(n, round(n * p1)), Arm(n, round(n * p0)), 0.5)
    large = estimate(Arm(4 * n, 4 * round(n * p1)), Arm(4 * n, 4 * round(n * p0)), 0.5)
    assert large.high - large.low < small.high - small.low
    assert abs(large.effect) >= abs(small.effect) - 1e-12


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.floats(0.0, 0.5))
def test_the_draw_is_a_pure_function_of_unit_item_and_rate(unit: str, item: str, rate: float) -> None:
    assert withheld("ns", unit, item, rate) == withheld("ns", unit, item, rate)
    assert not withheld("ns", unit, item, 0.0)
    if withheld("ns", unit, item, rate):  # a larger rate withholds a superset
        assert withheld("ns", unit, item, min(0.5, rate + 0.1))


def test_the_pre_action_check_draws_nothing(client: TestClient, settings: Any) -> None:
    """The check sums its exemplars' statistics: withholding some would move its risk."""
    fill(client, "chk", 0.5)
    for _ in range(5):
        r = client.post("/v1/namespaces/chk/check", json={"state": QUERY, "action": "go 1"})
        assert r.status_code == 200, r.text
    assert holdout_rows(settings) == []
