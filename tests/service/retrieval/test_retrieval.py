"""Retrieval over exemplars on SQLite and PostgreSQL (hashing embedder; the real
model is exercised in test_retrieval_model.py): state matching, exemplar fields,
merging, credit, filters and leakage guards, deletes, utility, read-your-writes,
rendering, MMR and reindex; a merged exemplar's exact matches under the internal
state of each of its occurrences (live, pinned, after reindex)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import null, update

from reflectors.reindex import rebuild_internal_hashes, reindex
from store.models import Reflection, ReflectionEvidence
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

NS = "/v1/namespaces/mem"

KITCHEN = "You are in the kitchen. A kettle sits on the stove next to a sink."
GARDEN = "You are in the garden. Roses grow by a wooden fence under the oak tree."
CELLAR = "You are in the dark cellar. Wine barrels line the damp stone walls."


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "mem", gamma=0.5)
    return client


def ingest(api: TestClient, id: str, steps: list[dict[str, Any]], outcome: dict[str, Any], **fields: Any) -> str:
    body = {"task": "chores", "environment": "house", "steps": steps, "outcome": outcome, **fields}
    return str(post_trajectory(api, "mem", id, **body)["consistency_token"])


def retrieve(api: TestClient, obs: str, **extra: Any) -> dict[str, Any]:
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": obs}, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_state_matched_exemplar_comes_first_with_its_fields(api: TestClient) -> None:
    ingest(
        api, "t1", [step(KITCHEN, "boil water", reward=0.0), step(GARDEN, "water roses", reward=1.0)], {"success": True}
    )
    ingest(api, "t2", [step(CELLAR, "open barrel", result="It is sealed.", reward=0.0)], {"success": False})
    assert drain(api) >= 2  # the exemplar jobs, then the coalesced contrastive recount
    out = retrieve(api, "The kitchen: a kettle on the stove, a sink.", k=3)
    assert out["gamma"] == 0.5 and out["retrieval_id"].startswith("r_")
    first = out["items"][0]
    assert first["kind"] == "exemplar" and first["content"]["observation"] == KITCHEN
    c = first["content"]
    # rtg = 0 + 0.5 * 1.0 (hand computed), credited with the episode's success
    assert c["action"] == "boil water" and c["return_to_go"] == pytest.approx(0.5)
    assert (c["count"], c["success_count"], c["failure_count"], c["success"]) == (1, 1, 0, True)
    assert first["evidence"] == [{"trajectory_id": "t1", "step_start": 0, "step_end": 0}]
    assert first["similarity"] == first["state_similarity"] > out["items"][1]["similarity"]
    assert first["utility"]["uses"] == 0 and first["score"] == pytest.approx(first["similarity"], rel=0.2)
    assert not first["exact_match"]  # a paraphrase of the kitchen, not its very text
    # The failed one-step episode: its only step is debited.
    cellar = next(i for i in out["items"] if i["content"]["observation"] == CELLAR)
    assert (cellar["content"]["failure_count"], cellar["content"]["success"]) == (1, False)


def test_failure_credit_goes_to_the_step_that_caused_it(api: TestClient) -> None:
    steps = [step(KITCHEN, "boil water"), step(GARDEN, "cut the fence", caused_failure=True), step(CELLAR, "wait")]
    ingest(api, "f1", steps, {"success": False, "reward": -1.0})
    drain(api)
    items = {i["content"]["action"]: i["content"] for i in retrieve(api, KITCHEN, k=10)["items"]}
    assert items["cut the fence"]["failure_count"] == 1
    assert items["boil water"]["failure_count"] == 0 and items["boil water"]["success"] is None
    assert items["wait"]["failure_count"] == 0
    # No step rewards: the outcome reward lands on the last step and flows back.
    assert items["wait"]["return_to_go"] == pytest.approx(-1.0)
    assert items["boil water"]["return_to_go"] == pytest.approx(-0.25)


def test_a_truncated_failure_debits_no_step(api: TestClient) -> None:
    """Cut off by a step limit: the last action ended nothing, so nothing is debited
    (an untruncated failure with no flagged step debits its last step)."""
    ingest(api, "cut", [step(KITCHEN, "boil water"), step(GARDEN, "wait", truncated=True)], {"success": False})
    ingest(api, "end", [step(CELLAR, "open barrel")], {"success": False})
    drain(api)
    items = {i["content"]["action"]: i["content"] for i in retrieve(api, KITCHEN, k=10)["items"]}
    assert items["wait"]["failure_count"] == 0 and items["boil water"]["failure_count"] == 0
    assert items["open barrel"]["failure_count"] == 1


def test_identical_state_action_pairs_merge(api: TestClient) -> None:
    ingest(api, "m1", [step(KITCHEN, "boil water", reward=1.0)], {"success": True})
    ingest(api, "m2", [step(KITCHEN, "boil water", reward=0.0)], {"success": False})
    ingest(api, "m3", [step(KITCHEN, "boil water", reward=1.0)], {"success": True})
    ingest(api, "m4", [step(KITCHEN, "smash kettle", reward=0.0)], {"success": False})
    drain(api)
    items = retrieve(api, KITCHEN, k=10)["items"]
    assert len(items) == 2
    merged = next(i for i in items if i["content"]["action"] == "boil water")
    c = merged["content"]
    assert (c["count"], c["success_count"], c["failure_count"]) == (3, 2, 1)
    assert c["return_to_go"] == pytest.approx(2 / 3)
    assert merged["evidence_count"] == 3
    assert {e["trajectory_id"] for e in merged["evidence"]} == {"m1", "m2", "m3"}
    # Deleting one source recomputes the merged statistics; the last source takes it away.
    api.delete(f"{NS}/trajectories/m2")
    drain(api)
    c = next(i for i in retrieve(api, KITCHEN)["items"] if i["content"]["action"] == "boil water")["content"]
    assert (c["count"], c["success_count"], c["failure_count"]) == (2, 2, 0)
    api.delete(f"{NS}/trajectories/m4")
    assert [i["content"]["action"] for i in retrieve(api, KITCHEN)["items"]] == ["boil water"]


def test_filters_and_leakage_guards(api: TestClient) -> None:
    ingest(
        api, "a", [step(KITCHEN, "boil water")], {"success": True}, task="make tea", agent="ann", policy_version="v1"
    )
    ingest(
        api,
        "b",
        [step(KITCHEN, "fill kettle")],
        {"success": True},
        task="make coffee",
        agent="bob",
        policy_version="v2",
    )
    drain(api)

    def actions(**extra: Any) -> set[str]:
        return {i["content"]["action"] for i in retrieve(api, KITCHEN, **extra)["items"]}

    assert actions() == {"boil water", "fill kettle"}
    assert actions(filters={"exclude_tasks": ["make tea"]}) == {"fill kettle"}
    assert actions(filters={"exclude_trajectory_ids": ["b"]}) == {"boil water"}
    assert actions(filters={"agent": "bob"}) == {"fill kettle"}
    assert actions(filters={"policy_version": "v1"}) == {"boil water"}
    assert actions(environment="elsewhere") == set()
    assert actions(kinds=["heuristic"]) == set()
    assert actions(filters={"as_of": "2000-01-01T00:00:00Z"}) == set()
    assert actions(filters={"status": ["retired"]}) == set()
    assert actions(min_score=2.0) == set()


def test_utility_reorders_items_within_the_band(api: TestClient) -> None:
    """Two actions seen in the very same state are both exact matches: the one that
    keeps failing when served sinks below the other; a credited success lifts one."""
    ingest(api, "u", [step(KITCHEN, "boil water"), step(KITCHEN, "fix sink")], {"success": True})
    drain(api)
    first = retrieve(api, KITCHEN, k=2)["items"]
    assert [i["exact_match"] for i in first] == [True, True]
    top, other_id = first[0]["id"], first[1]["id"]
    # Serve the top item alone and report failure each time: it keeps failing, it sinks.
    failures = 0
    while failures < 10:
        r = retrieve(api, KITCHEN, k=1)
        if r["items"][0]["id"] != top:
            break
        out = api.post(f"{NS}/retrievals/{r['retrieval_id']}/outcome", json={"success": False})
        assert out.status_code == 200 and out.json()["credited_items"] == 1
        failures += 1
    assert 1 <= failures < 10
    # A reported success for the other one, through an episode that listed the retrieval.
    other = retrieve(api, KITCHEN, k=1)
    assert other["items"][0]["id"] == other_id
    ingest(api, "user", [step(GARDEN, "walk")], {"success": True}, retrieval_ids=[other["retrieval_id"]])
    after = retrieve(api, KITCHEN, k=2)["items"]
    assert after[0]["id"] == other_id and after[0]["utility"]["successes"] >= 1
    sunk = after[1]
    assert sunk["id"] == top and sunk["exact_match"]
    assert sunk["utility"]["failures"] == failures and sunk["utility"]["mean"] < sunk["utility"]["baseline"]
    assert sunk["score"] < after[0]["score"]
    # The baseline counts every outcome of the namespace, from both credit paths.
    baseline = (1 + 1) / (failures + 1 + 2)
    assert after[0]["utility"]["baseline"] == pytest.approx(baseline)
    # Outcome replay and conflict (neither counts again).
    rid = other["retrieval_id"]
    r = api.post(f"{NS}/retrievals/{rid}/outcome", json={"success": False})
    assert r.status_code == 409
    assert retrieve(api, KITCHEN, k=1)["items"][0]["utility"]["baseline"] == pytest.approx(baseline)
    assert api.post(f"{NS}/retrievals/r_nope/outcome", json={"success": True}).status_code == 404


def test_an_outcome_can_credit_only_the_items_acted_on(api: TestClient) -> None:
    ingest(api, "s", [step(KITCHEN, "boil water"), step(KITCHEN + " The sink drips.", "fix sink")], {"success": True})
    drain(api)
    served = retrieve(api, KITCHEN, k=2)
    by_action = {i["content"]["action"]: i["id"] for i in served["items"]}
    url = f"{NS}/retrievals/{served['retrieval_id']}/outcome"
    bad = api.post(url, json={"success": True, "item_ids": [by_action["boil water"], "ex_not_served"]})
    assert bad.status_code == 422
    assert (bad.json()["error"]["field"], bad.json()["error"]["rule"]) == ("item_ids[1]", "served")
    ok = api.post(url, json={"success": True, "item_ids": [by_action["boil water"]]})
    assert ok.status_code == 200 and ok.json()["credited_items"] == 1
    # A replay must name the same items; another set is a conflict.
    assert api.post(url, json={"success": True, "item_ids": [by_action["boil water"]]}).json()["credited_items"] == 0
    assert api.post(url, json={"success": True}).status_code == 409
    uses = {i["content"]["action"]: i["utility"]["uses"] for i in retrieve(api, KITCHEN, k=2)["items"]}
    assert uses == {"boil water": 1, "fix sink": 0}


def test_episode_linked_retrieval_is_credited_when_it_closes(api: TestClient) -> None:
    ingest(api, "src", [step(KITCHEN, "boil water")], {"success": True})
    drain(api)
    api.post(f"{NS}/trajectories", json={"id": "ep", "task": "t"})
    r = retrieve(api, KITCHEN, trajectory_id="ep")
    api.post(f"{NS}/trajectories/ep/outcome", json={"success": True})
    item = retrieve(api, KITCHEN)["items"][0]
    assert (item["utility"]["uses"], item["utility"]["successes"]) == (1, 1)
    assert r["items"][0]["id"] == item["id"]


def test_read_your_writes_with_the_consistency_token(api: TestClient) -> None:
    token = ingest(api, "fresh", [step(CELLAR, "light candle")], {"success": True})
    worker = api.app.state.services.worker  # type: ignore[attr-defined]
    r = api.post(
        f"{NS}/retrieve", json={"state": {"observation": CELLAR}, "consistency_token": token, "wait_timeout_ms": 50}
    )
    assert r.status_code == 504 and r.json()["error"]["type"] == "consistency_timeout"
    worker.start()
    try:
        out = retrieve(api, CELLAR, consistency_token=token, wait_timeout_ms=10_000)
    finally:
        worker.stop()
    assert out["items"][0]["content"]["action"] == "light candle"
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": "x"}, "consistency_token": "garbage"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "consistency_token"
    assert retrieve(api, "x", consistency_token="c1.0")["waited_ms"] == 0


def test_render_respects_the_budget(api: TestClient) -> None:
    ingest(
        api,
        "r",
        [step(KITCHEN, "boil water", result="The water boils."), step(GARDEN, "water roses")],
        {"success": True},
    )
    drain(api)
    for fmt in ("markdown", "text", "json"):
        out = retrieve(api, KITCHEN, render={"format": fmt, "max_chars": 400})
        assert out["context"] and len(out["context"]) <= 400
    md = retrieve(api, KITCHEN, render={"format": "markdown", "max_chars": 2000})["context"]
    assert md.startswith("## Past experience in similar states") and "Action: boil water" in md
    assert "The water boils." in md
    tiny = retrieve(api, KITCHEN, render={"format": "markdown", "max_chars": 100})["context"]
    assert len(tiny) <= 100  # nothing fits whole: nothing cut in half


def test_mmr_diversifies(api: TestClient) -> None:
    near = [step(KITCHEN + f" Variant {i}.", f"act {i}") for i in range(4)]
    ingest(api, "d", [*near, step(CELLAR + " The kitchen is above.", "climb")], {"success": True})
    drain(api)
    plain = [i["content"]["action"] for i in retrieve(api, KITCHEN, k=3)["items"]]
    diverse = [i["content"]["action"] for i in retrieve(api, KITCHEN, k=3, mmr_lambda=0.3)["items"]]
    assert "climb" not in plain and "climb" in diverse


def test_reindex_gives_identical_results(api: TestClient) -> None:
    for i, (obs, act) in enumerate([(KITCHEN, "boil"), (GARDEN, "dig"), (CELLAR, "look")]):
        ingest(api, f"x{i}", [step(obs, act)], {"success": i % 2 == 0})
    drain(api)
    before = retrieve(api, "kettle stove kitchen garden", k=3)["items"]
    services = api.app.state.services  # type: ignore[attr-defined]
    counts = reindex(services.db, services.embedder, services.registry, ["mem"])
    assert counts == {"mem": 3}  # one state vector per exemplar (none has an internal state)
    after = retrieve(api, "kettle stove kitchen garden", k=3)["items"]
    assert [(i["id"], round(i["score"], 6)) for i in after] == [(i["id"], round(i["score"], 6)) for i in before]


def test_bad_retrieve_requests(api: TestClient) -> None:
    r = api.post(f"{NS}/retrieve", json={"state": {}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "state.observation"
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": "x"}, "k": 0})
    assert r.status_code == 422 and r.json()["error"]["field"] == "k"
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": "x"}, "kinds": ["memes"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "kinds[0]"
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": "x" * 2_000_000}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "state.observation"
    assert api.post("/v1/namespaces/none/retrieve", json={"state": {"observation": "x"}}).status_code == 404


def test_close_with_wait_ms(api: TestClient) -> None:
    api.post(f"{NS}/trajectories", json={"id": "w", "task": "t", "steps": [step(GARDEN, "dig")]})
    r = api.post(f"{NS}/trajectories/w/outcome", params={"wait_ms": 50}, json={"success": True})
    assert r.status_code == 504 and r.json()["error"]["rule"] == "wait_timeout"
    assert api.get(f"{NS}/trajectories/w").json()["status"] == "closed"  # stored either way
    worker = api.app.state.services.worker  # type: ignore[attr-defined]
    worker.start()
    try:
        r = api.post(f"{NS}/trajectories/w/outcome", params={"wait_ms": 10_000}, json={"success": True})
    finally:
        worker.stop()
    assert r.status_code == 200
    assert retrieve(api, GARDEN)["items"][0]["content"]["action"] == "dig"


@pytest.mark.parametrize("utility_weight", [None, 2.0])
def test_an_exact_match_outranks_look_alikes_whatever_their_utility(client: TestClient, utility_weight: Any) -> None:
    """Adversarial utility: look-alike states credited with success every time they
    were served, the very state debited every time. On defaults (and at the largest
    utility weight) the exact match still ranks first; the look-alikes only reorder
    among themselves."""
    ranking = {} if utility_weight is None else {"ranking": {"utility_weight": utility_weight}}
    create_namespace(client, "adv", **ranking)
    look_alikes = [KITCHEN + " The sink drips.", KITCHEN.replace("kettle", "teapot"), KITCHEN + " It is 3 pm."]
    steps = [step(KITCHEN, "touch the hot stove")] + [step(o, f"act {i}") for i, o in enumerate(look_alikes)]
    post_trajectory(client, "adv", "t", task="chores", steps=steps, outcome={"success": True})
    drain(client)

    def served() -> list[dict[str, Any]]:
        r = client.post("/v1/namespaces/adv/retrieve", json={"state": {"observation": KITCHEN}, "k": 4})
        assert r.status_code == 200, r.text
        return r.json()

    exact = served()["items"][0]
    assert exact["exact_match"] and exact["content"]["observation"] == KITCHEN
    for _ in range(8):
        out = served()
        ids = [i["id"] for i in out["items"]]
        others = [i for i in ids if i != exact["id"]]
        client.post(
            f"/v1/namespaces/adv/retrievals/{out['retrieval_id']}/outcome",
            json={"success": True, "item_ids": others},
        ).raise_for_status()
        out = served()
        client.post(
            f"/v1/namespaces/adv/retrievals/{out['retrieval_id']}/outcome",
            json={"success": False, "item_ids": [exact["id"]]},
        ).raise_for_status()
    items = served()["items"]
    assert items[0]["id"] == exact["id"] and items[0]["exact_match"]
    assert items[0]["utility"]["mean"] < items[0]["utility"]["baseline"] < items[1]["utility"]["mean"]
    assert all(not i["exact_match"] for i in items[1:])
    assert items[0]["score"] > max(i["score"] for i in items[1:])


# -- a state revisited under another internal state -------------------------------

TEA, DISHES = "make tea", "wash the dishes"
DRIPS = KITCHEN + " The sink drips."


def revisit(api: TestClient) -> None:
    """The same (state, action) under two subgoals (one merged exemplar, its content
    the first occurrence's: indexed first), and a look-alike state under the second
    subgoal: by similarity alone it ranks above the merged exemplar for that subgoal."""
    ingest(api, "p1", [step(KITCHEN, "boil water", internal_state=TEA)], {"success": True})
    drain(api)
    ingest(api, "p2", [step(KITCHEN, "boil water", internal_state=DISHES)], {"success": True})
    ingest(api, "p3", [step(DRIPS, "fill the sink", internal_state=DISHES)], {"success": True})
    drain(api)


def served(api: TestClient, internal: str, **extra: Any) -> list[dict[str, Any]]:
    return list(retrieve(api, KITCHEN, internal_state=internal, k=5, **extra)["items"])


def assert_exact_first(items: list[dict[str, Any]], count: int) -> None:
    first = items[0]
    assert first["exact_match"] is True and first["content"]["action"] == "boil water", items
    assert first["content"]["internal_state"] == TEA and first["content"]["count"] == count
    assert not any(i["exact_match"] for i in items[1:])
    assert first["score"] > max(i["score"] for i in items[1:])


def test_a_merged_exemplar_is_exact_under_the_internal_state_of_each_occurrence(api: TestClient) -> None:
    revisit(api)
    for internal in (TEA, DISHES):
        assert_exact_first(served(api, internal), count=2)
    # The same through the batch route (candidate rows fetched once for many requests).
    r = api.post(
        f"{NS}/retrieve/batch",
        json={"requests": [{"state": {"observation": KITCHEN}, "internal_state": i, "k": 5} for i in (TEA, DISHES)]},
    )
    assert r.status_code == 200, r.text
    for result in r.json()["results"]:
        assert_exact_first(result["items"], count=2)
    # An internal state no occurrence had is no exact match; the similarity stays the
    # cosine to the internal state the item shows (its first occurrence's).
    other = served(api, "sweep the floor")
    assert not any(i["exact_match"] for i in other)
    # An occurrence deleted with its trajectory takes its internal state's exactness along.
    assert api.delete(f"{NS}/trajectories/p2").status_code == 200
    drain(api)
    assert_exact_first(served(api, TEA), count=1)
    merged = next(i for i in served(api, DISHES) if i["content"]["action"] == "boil water")
    assert merged["exact_match"] is False


def test_a_snapshot_pins_the_exact_matches_of_its_moment(api: TestClient) -> None:
    revisit(api)
    assert api.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    assert api.delete(f"{NS}/trajectories/p2").status_code == 200  # live memory moves on
    drain(api)
    assert not next(i for i in served(api, DISHES) if i["content"]["action"] == "boil water")["exact_match"]
    for internal in (TEA, DISHES):
        pinned = served(api, internal, snapshot="s1")
        assert_exact_first(pinned, count=2)
        assert served(api, internal, snapshot="s1") == pinned  # and deterministically so


def test_reindex_fills_in_the_internal_states_of_occurrences_written_before_0010(api: TestClient) -> None:
    revisit(api)
    services = api.app.state.services  # type: ignore[attr-defined]
    with services.db.write() as session:  # what rows written before migration 0010 look like
        session.execute(update(ReflectionEvidence).values(internal_hash=None))
        session.execute(update(Reflection).values(internal_hashes=null()))
    assert_exact_first(served(api, TEA), count=2)  # the first occurrence's, through its vector
    assert not next(i for i in served(api, DISHES) if i["content"]["action"] == "boil water")["exact_match"]
    assert rebuild_internal_hashes(services.db, "mem") == 2  # both exemplars (each has occurrences to hash)
    assert rebuild_internal_hashes(services.db, "mem") == 0  # nothing left to fill in
    reindex(services.db, services.embedder, services.registry, ["mem"])
    for internal in (TEA, DISHES):
        assert_exact_first(served(api, internal), count=2)
