"""The pre-action check (POST …/check) on SQLite and PostgreSQL: hand-built histories
with known failure rates, the Wilson interval computed here by hand, the order of
the alternatives, the exact state first, states "like this" by min_similarity, no
history, namespace isolation, the heuristics that name an action, bad input, roles."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from store.database import Database
from tests.factories import add_reflection, step
from tests.fixtures import create_namespace, drain, post_trajectory

S = "You stand before a heavy oak door. It is locked; a brass key lies on the mat."
NEAR = "You stand before a heavy oak door. It is locked; an iron key lies on the mat."  # cosine ~0.84
FAR = "You are in the garden. Roses grow by a wooden fence under the oak tree."  # cosine ~0.26
CHECK = "/v1/namespaces/m/check"


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "m")
    return client


def episode(api: TestClient, id: str, steps: list[dict[str, Any]], success: bool, ns: str = "m") -> None:
    post_trajectory(api, ns, id, task="open the door", environment="house", steps=steps, outcome={"success": success})


def one_step(api: TestClient, prefix: str, obs: str, action: Any, outcomes: list[bool], ns: str = "m") -> None:
    """One one-step episode per outcome: its only step is credited (success) or debited (failure)."""
    for i, ok in enumerate(outcomes):
        episode(api, f"{prefix}-{i}", [step(obs, action)], ok, ns)


def check(api: TestClient, action: Any, obs: str = S, ns: str = "m", **extra: Any) -> dict[str, Any]:
    r = api.post(f"/v1/namespaces/{ns}/check", json={"state": {"observation": obs}, "action": action, **extra})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def wilson(x: int, n: int) -> tuple[float, float]:
    """By hand: the 95% Wilson score interval, z = 1.96 (to 1e-4 of the exact quantile)."""
    z = 1.96
    p = x / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_wilson_by_hand() -> None:
    # 3 of 4: p = .75, z² = 3.8416: centre = (.75 + .4802)/1.9604 = .62753, half = .34880 (pen and paper)
    low, high = wilson(3, 4)
    assert low == pytest.approx(0.30064, abs=1e-4) and high == pytest.approx(0.95441, abs=1e-4)
    low, high = wilson(5, 5)  # all successes: the upper bound is 1, the lower n / (n + z²)
    assert low == pytest.approx(5 / (5 + 1.96**2), abs=1e-9) and high == pytest.approx(1.0)


def test_known_failure_rates_wilson_interval_and_alternatives_order(api: TestClient) -> None:
    one_step(api, "kick", S, "kick door", [False, False, True, False])  # failed 3 of 4
    one_step(api, "unlock", S, "unlock door", [True] * 5)  # 5 of 5
    one_step(api, "knock", S, "knock", [True, False])  # 1 of 2
    one_step(api, "window", S, "open window", [False, True])  # 1 of 2: ties knock, which sorts first
    # A failed episode's first step is neither credited nor debited (its last step is).
    episode(api, "look", [step(S, "look around"), step(FAR, "give up")], False)
    one_step(api, "far", FAR, "kick door", [True, True, True])  # a state not like this one
    drain(api)

    out = check(api, "kick door")
    risk = out["risk"]
    assert (risk["failures"], risk["attempts"], out["support"]) == (3, 4, 4)
    assert risk["rate"] == pytest.approx(0.75)
    low, high = wilson(3, 4)
    assert risk["low"] == pytest.approx(low, abs=1e-4) and risk["high"] == pytest.approx(high, abs=1e-4)
    assert out["exact_match"] is True and out["retrieval_id"].startswith("r_")
    assert out["states"] == 5  # (S, kick door), (S, unlock door), (S, knock), (S, open window), (S, look around)

    # The steps behind it: failures first, each linkable to its trajectory.
    ev = out["evidence"]
    assert [(e["trajectory_id"], e["step_index"], e["success"]) for e in ev] == [
        ("kick-0", 0, False),
        ("kick-1", 0, False),
        ("kick-3", 0, False),
        ("kick-2", 0, True),
    ]
    assert all(e["exact_match"] and e["similarity"] == pytest.approx(1.0, abs=1e-5) for e in ev)
    t = api.get(f"/v1/namespaces/m/trajectories/{ev[0]['trajectory_id']}").json()
    assert t["steps"][ev[0]["step_index"]]["action"] == "kick door"

    alts = [(a["action"], a["successes"], a["failures"], a["support"]) for a in out["alternatives"]]
    assert alts == [("unlock door", 5, 0, 5), ("knock", 1, 1, 2), ("open window", 1, 1, 2), ("look around", 0, 0, 1)]
    unlock, knock, window, look = out["alternatives"]
    assert unlock["success_rate"] == 1.0
    assert (unlock["low"], unlock["high"]) == pytest.approx(wilson(5, 5), abs=1e-4)
    assert knock["success_rate"] == 0.5 and (knock["low"], knock["high"]) == pytest.approx(wilson(1, 2), abs=1e-4)
    assert window["low"] == knock["low"]
    assert (look["success_rate"], look["low"], look["high"], look["attempts"]) == (None, None, None, 0)

    # The same action in other words: case and whitespace do not matter.
    assert check(api, "  Kick   DOOR ")["risk"] == risk
    # Every state like this: with no threshold the garden's three successes count too.
    wide = check(api, "kick door", min_similarity=-1.0)
    assert (wide["risk"]["failures"], wide["risk"]["attempts"]) == (3, 7)
    assert [e["trajectory_id"] for e in wide["evidence"]][-3:] == ["far-0", "far-1", "far-2"]


def test_the_exact_state_comes_first_then_states_like_it(api: TestClient) -> None:
    one_step(api, "a-near", NEAR, "kick door", [True, True])  # sorts first by id, and fares better
    one_step(api, "z-exact", S, "kick door", [False])
    drain(api)
    out = check(api, "kick door")
    assert out["states"] == 2 and out["exact_match"] is True
    assert [(e["trajectory_id"], e["exact_match"]) for e in out["evidence"]] == [
        ("z-exact-0", True),
        ("a-near-0", False),
        ("a-near-1", False),
    ]
    near = out["evidence"][1]["similarity"]
    assert out["evidence"][0]["similarity"] == pytest.approx(1.0, abs=1e-5) and near < 0.99
    assert (out["risk"]["failures"], out["risk"]["attempts"]) == (1, 3)
    # Above the near state's similarity only the exact state is like this one.
    strict = check(api, "kick door", min_similarity=min(1.0, near + 0.01))
    assert (strict["states"], strict["risk"]["failures"], strict["risk"]["attempts"]) == (1, 1, 1)
    # The near state alone: no exact match.
    other = check(api, "kick door", obs=NEAR, min_similarity=0.99)
    assert other["exact_match"] is True and other["risk"]["attempts"] == 2
    assert other["evidence"][0]["trajectory_id"] == "a-near-0"


def test_another_plan_ranks_but_never_excludes_the_same_state(api: TestClient) -> None:
    episode(api, "planned", [step(S, "kick door", internal_state="look under the mat for a key")], False)
    drain(api)
    out = check(api, "kick door", internal_state="dance a jig in the moonlight", min_similarity=0.99)
    assert (out["states"], out["risk"]["failures"], out["risk"]["attempts"]) == (1, 1, 1)
    assert out["exact_match"] is False  # retrieval's exactness includes the plan when the query gives one
    assert out["evidence"][0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    same = check(api, "kick door", internal_state="look under the mat for a key")
    assert same["exact_match"] is True and same["risk"]["attempts"] == 1


def test_a_state_with_no_history_is_no_error(api: TestClient) -> None:
    out = check(api, "kick door")
    assert out["risk"] == {"rate": None, "low": None, "high": None, "failures": 0, "attempts": 0}
    assert (out["support"], out["exact_match"], out["states"]) == (0, False, 0)
    assert out["evidence"] == [] and out["alternatives"] == [] and out["heuristics"] == []
    # History of other actions only: the alternatives, and no risk for this one.
    one_step(api, "unlock", S, "unlock door", [True])
    drain(api)
    out = check(api, "kick door")
    assert out["risk"]["rate"] is None and out["support"] == 0 and out["evidence"] == []
    assert [a["action"] for a in out["alternatives"]] == ["unlock door"]


def test_another_namespace_history_never_counts(api: TestClient) -> None:
    create_namespace(api, "other")
    one_step(api, "theirs", S, "kick door", [False] * 4, ns="other")
    one_step(api, "theirs-u", S, "unlock door", [True], ns="other")
    one_step(api, "mine", S, "kick door", [True])
    drain(api)
    out = check(api, "kick door")
    assert (out["risk"]["failures"], out["risk"]["attempts"], out["support"]) == (0, 1, 1)
    assert [e["trajectory_id"] for e in out["evidence"]] == ["mine-0"] and out["alternatives"] == []
    theirs = check(api, "kick door", ns="other")
    assert (theirs["risk"]["failures"], theirs["risk"]["attempts"]) == (4, 4)


def test_tool_call_actions_match_as_json(api: TestClient) -> None:
    call = {"name": "open", "arguments": {"door": "front", "force": True}}
    one_step(api, "call", S, call, [False, True])
    one_step(api, "other", S, {"name": "open", "arguments": {"door": "back"}}, [True])
    one_step(api, "text", S, "open the back door", [True])  # ties the object: text sorts first
    drain(api)
    out = check(api, {"arguments": {"force": True, "door": "front"}, "name": "open"})  # key order differs
    assert (out["risk"]["failures"], out["risk"]["attempts"]) == (1, 2)
    assert [a["action"] for a in out["alternatives"]] == [
        "open the back door",
        {"name": "open", "arguments": {"door": "back"}},
    ]


def add_heuristic(db: Database, id: str, trigger: str, guideline: str, status: str = "active", **extra: Any) -> None:
    content = {"trigger": trigger, "guideline": guideline, "rationale": "kick door (only the rationale says it)"}
    with db.write() as session:
        add_reflection(
            session, "m", id, kind="heuristic", content=content, status=status, text=f"{trigger}\n{guideline}", **extra
        )


def test_heuristics_that_name_the_action(api: TestClient) -> None:
    db: Database = api.app.state.services.db  # type: ignore[attr-defined]
    add_heuristic(db, "h-guideline", "When a door is locked", "Never Kick  Door; unlock it.")
    add_heuristic(db, "h-trigger", "Before you kick door panels", "Look for a key first.")
    add_heuristic(db, "h-part-of-a-word", "When a door is locked", "Do not kick doorframes.")
    add_heuristic(db, "h-rationale-only", "When a door is locked", "Use the key.")
    add_heuristic(db, "h-retired", "When a door is locked", "Never kick door.", status="retired")
    add_heuristic(db, "h-candidate", "When a door is locked", "Never kick door.", status="candidate")
    add_heuristic(db, "h-tool", "When a door is locked", "Call kick_door only as a last resort.")
    out = check(api, "kick door")
    assert [h["id"] for h in out["heuristics"]] == ["h-guideline", "h-trigger"]
    assert out["heuristics"][0]["text"].startswith("When a door is locked")
    # A tool call is named by its `name`.
    assert [h["id"] for h in check(api, {"name": "kick_door", "arguments": {}})["heuristics"]] == ["h-tool"]
    assert check(api, {"arguments": {"x": 1}})["heuristics"] == []  # no name: nothing names it
    # Non-ASCII phrases: no SQL pre-filter, the same rule.
    add_heuristic(db, "h-accent", "Vor der Tür", "Nicht TÜR TRETEN.")
    assert [h["id"] for h in check(api, "tür treten")["heuristics"]] == ["h-accent"]


def test_at_most_twenty_heuristics_oldest_first(api: TestClient) -> None:
    """Ids that sort the other way round from creation: the first 20 created come back,
    in creation order, past the ones that hold the word but do not name the action."""
    db: Database = api.app.state.services.db  # type: ignore[attr-defined]
    for n in range(25):
        add_heuristic(db, f"h-near-{99 - n:02d}", "When a door is locked", "Do not kick doorframes.")
        add_heuristic(db, f"h-{99 - n:02d}", "When a door is locked", "Never kick door.")
    assert [h["id"] for h in check(api, "kick door")["heuristics"]] == [f"h-{99 - n:02d}" for n in range(20)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"state": {"observation": "x"}}, "action"),
        ({"state": {"observation": "x"}, "action": ""}, "action"),
        ({"state": {"observation": "x"}, "action": "   "}, "action"),
        ({"state": {"observation": "x"}, "action": {}}, "action"),
        ({"state": {"observation": "x"}, "action": 3}, "action"),
        ({"state": {"observation": ""}, "action": "a"}, "state.observation"),
        ({"state": {"observation": " \n"}, "action": "a"}, "state.observation"),
        ({"action": "a"}, "state"),
        ({"state": {"observation": "x"}, "action": "a", "k": 0}, "k"),
        ({"state": {"observation": "x"}, "action": "a", "k": 101}, "k"),
        ({"state": {"observation": "x"}, "action": "a", "min_similarity": 1.5}, "min_similarity"),
        ({"state": {"observation": "x"}, "action": "a", "filters": {"status": []}}, "filters.status"),
        ({"state": {"observation": "x"}, "action": "a", "kinds": ["skill"]}, "kinds"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(api: TestClient, body: dict[str, Any], field: str) -> None:
    r = api.post(CHECK, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"].startswith(field), r.text


def test_an_action_object_is_bounded_as_a_steps_action(api: TestClient) -> None:
    deep: dict[str, Any] = {"name": "x"}
    for _ in range(200):
        deep = {"a": deep}
    r = api.post(CHECK, json={"state": {"observation": "x"}, "action": deep})
    assert r.status_code == 422 and r.json()["error"]["rule"] == "max_json_depth", r.text
    # Numbers JSON holds but 64 bits do not are still an action (compared as JSON).
    assert check(api, {"name": "x", "n": 2**70})["risk"]["rate"] is None


def test_agent_keys_may_check_and_namespaces_are_scoped(api: TestClient) -> None:
    create_namespace(api, "other")
    key = api.post("/v1/keys", json={"role": "agent", "namespaces": ["m"]}).json()["key"]
    agent = {"Authorization": f"Bearer {key}"}
    body = {"state": {"observation": S}, "action": "kick door"}
    assert api.post(CHECK, json=body, headers=agent).status_code == 200
    r = api.post("/v1/namespaces/other/check", json=body, headers=agent)
    assert r.status_code == 404 and r.json()["error"]["field"] == "namespace"
    r = api.post("/v1/namespaces/missing/check", json=body)
    assert r.status_code == 404 and r.json()["error"]["field"] == "namespace"
    assert api.post(CHECK, json=body, headers={"Authorization": ""}).status_code == 401
