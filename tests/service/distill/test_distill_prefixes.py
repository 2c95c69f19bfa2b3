"""POST …/distill/prefixes (ReOPD prefix replay) on both engines: the step-decay
schedule against hand-computed values and its properties, which stored successes
are chosen and in what order, the leakage guards (the rollout itself and its group
withheld unless allowed), reads under a snapshot, bad input naming the field and
the rule, and permissions."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from service.distill.prefixes.schedule import fraction, prefix_steps
from tests.factories import step
from tests.fixtures import create_namespace, post_trajectory

NS = "/v1/namespaces/lab"
URL = f"{NS}/distill/prefixes"
TASK = "fetch the key"
SCHEDULE = {"kind": "step_decay", "start_fraction": 0.8, "half_life_steps": 10}


# -- the schedule, by hand ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("step_", "start", "half_life", "floor", "expected"),
    [
        (0, 0.8, 10, 0.0, 0.8),
        (10, 0.8, 10, 0.0, 0.4),  # one half-life: halved
        (20, 0.8, 10, 0.0, 0.2),
        (5, 1.0, 5, 0.0, 0.5),
        (5, 1.0, 10, 0.0, 2**-0.5),  # half a half-life: 1/sqrt(2) = 0.70710678…
        (100, 0.8, 10, 0.1, 0.1),  # 0.8/1024 is under the floor
        (30, 0.8, 10, 0.1, 0.1),  # 0.8/8 = 0.1 exactly: the floor and the decay agree
    ],
)
def test_the_fraction_halves_every_half_life(
    step_: int, start: float, half_life: float, floor: float, expected: float
) -> None:
    assert fraction(step_, start, half_life, floor) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("total", "share", "expected"),
    [
        (10, 0.8, 8),
        (10, 0.7, 7),  # 0.7 * 10 = 7.000000000000001
        (10, 0.3, 3),  # 0.3 * 10 = 3.0000000000000004
        (7, 0.4, 2),  # 2.8 rounds down
        (3, 0.2, 0),  # under one step: no prefix
        (10, 1.0, 9),  # never the whole trajectory: the policy takes the last step
        (1, 1.0, 0),
        (0, 0.5, 0),
    ],
)
def test_a_prefix_holds_the_floor_of_the_share_and_never_the_whole(total: int, share: float, expected: int) -> None:
    assert prefix_steps(total, share) == expected


@given(
    start=st.floats(0.01, 1.0),
    half_life=st.floats(0.5, 1000.0),
    floor=st.floats(0.0, 1.0),
    a=st.integers(0, 10_000),
    b=st.integers(0, 10_000),
    total=st.integers(0, 500),
)
def test_the_schedule_only_decays_and_prefixes_stay_inside(
    start: float, half_life: float, floor: float, a: int, b: int, total: int
) -> None:
    floor = min(floor, start)
    early, late = sorted((a, b))
    f_early, f_late = fraction(early, start, half_life, floor), fraction(late, start, half_life, floor)
    assert floor <= f_late <= f_early <= start
    n_early, n_late = prefix_steps(total, f_early), prefix_steps(total, f_late)
    assert 0 <= n_late <= n_early <= max(0, total - 1)


# -- the route -----------------------------------------------------------------------------


def steps(n: int, tag: str) -> list[dict[str, Any]]:
    return [step(f"{tag}: room {i}", f"{tag}: move {i}", result=f"{tag}: moved {i}", reward=0.1) for i in range(n)]


def attempt(api: TestClient, id: str, n: int, *, success: bool, reward: float, group: str | None = None) -> None:
    post_trajectory(
        api,
        "lab",
        id,
        task=TASK,
        group_id=group,
        steps=steps(n, id),
        outcome={"success": success, "reward": reward},
    )


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "lab")
    attempt(client, "long", 5, success=True, reward=1.0)
    attempt(client, "half", 3, success=True, reward=0.5)
    attempt(client, "failed", 2, success=False, reward=0.0)
    attempt(client, "sibling", 3, success=True, reward=1.0, group="g")
    attempt(client, "self", 4, success=True, reward=1.0, group="g")
    post_trajectory(client, "lab", "other", task="another task", steps=steps(2, "other"), outcome={"success": True})
    return client


def prefixes(api: TestClient, **body: Any) -> dict[str, Any]:
    r = api.post(URL, json={"step": 10, "schedule": SCHEDULE, **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def picked(entry: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(p["trajectory_id"], p["prefix_steps"], p["total_steps"]) for p in entry["prefixes"]]


def test_a_task_gets_its_best_successes_cut_by_the_schedule(api: TestClient) -> None:
    out = prefixes(api, tasks=[TASK], k=3)
    assert out["fraction"] == pytest.approx(0.4) and out["step"] == 10 and out["snapshot"] is None
    (entry,) = out["entries"]
    # reward 1.0 first (fewer steps first: sibling 3, self 4, long 5); the failure never
    assert picked(entry) == [("sibling", 1, 3), ("self", 1, 4), ("long", 2, 5)]  # ⌊0.4·3⌋, ⌊1.6⌋, ⌊2.0⌋
    assert entry["candidates"] == 4 and entry["excluded"] == 0 and entry["trajectory_id"] is None
    long = entry["prefixes"][2]
    assert [s["action"] for s in long["steps"]] == ["long: move 0", "long: move 1"]
    assert long["steps"][1]["state"] == {"observation": "long: room 1", "data": None}
    assert long["steps"][1]["result"] == "long: moved 1" and long["reward"] == 1.0


def test_the_prefix_shrinks_as_the_trainer_steps_on(api: TestClient) -> None:
    lengths = []
    for trainer_step in (0, 10, 20, 40):
        r = api.post(URL, json={"tasks": [TASK], "step": trainer_step, "schedule": SCHEDULE, "k": 3})
        lengths.append([p["prefix_steps"] for p in r.json()["entries"][0]["prefixes"]])
    # fractions 0.8, 0.4, 0.2, 0.05 over 3, 4, 5 steps
    assert lengths == [[2, 3, 4], [1, 1, 2], [0, 0, 1], [0, 0, 0]]


def test_a_rollout_never_replays_itself_or_its_group_unless_allowed(api: TestClient) -> None:
    (entry,) = prefixes(api, trajectories=[{"id": "self"}], k=3)["entries"]
    assert picked(entry) == [("long", 2, 5), ("half", 1, 3)]
    assert entry["excluded"] == 2 and entry["trajectory_id"] == "self" and entry["task"] == TASK
    (entry,) = prefixes(api, trajectories=[{"id": "self"}], k=3, leakage={"allow_same_group": True})["entries"]
    assert [p["trajectory_id"] for p in entry["prefixes"]] == ["sibling", "long", "half"]
    both = {"allow_same_group": True, "allow_same_trajectory": True}
    (entry,) = prefixes(api, trajectories=[{"id": "self"}], k=3, leakage=both)["entries"]
    assert [p["trajectory_id"] for p in entry["prefixes"]] == ["sibling", "self", "long"]
    # an inline rollout of group g, not stored yet: its stored group mates are withheld
    inline = {"task": TASK, "id": "new-1", "group_id": "g"}
    (entry,) = prefixes(api, trajectories=[inline], k=3)["entries"]
    assert [p["trajectory_id"] for p in entry["prefixes"]] == ["long", "half"] and entry["trajectory_id"] == "new-1"


def test_entries_come_back_in_request_order_and_an_unknown_task_has_none(api: TestClient) -> None:
    out = prefixes(api, tasks=["another task", TASK, "never seen"])
    assert [e["task"] for e in out["entries"]] == ["another task", TASK, "never seen"]
    assert [picked(e) for e in out["entries"]] == [[("other", 0, 2)], [("sibling", 1, 3)], []]
    assert out["entries"][2]["candidates"] == 0


def test_a_snapshot_pins_the_successes_and_their_steps(api: TestClient) -> None:
    post_trajectory(api, "lab", "growing", task=TASK, steps=steps(1, "growing"))  # open, no outcome yet
    assert api.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    pinned = prefixes(api, tasks=[TASK], k=2, snapshot="s1")
    attempt(api, "better", 2, success=True, reward=2.0)
    r = api.post(f"{NS}/trajectories/growing/steps", json={"steps": steps(3, "more")})
    assert r.status_code in (200, 201), r.text
    r = api.post(f"{NS}/trajectories/growing/outcome", json={"success": True, "reward": 3.0})
    assert r.status_code in (200, 201), r.text
    assert prefixes(api, tasks=[TASK], k=2, snapshot="s1") == pinned
    assert pinned["snapshot"] == "s1" and pinned["entries"][0]["candidates"] == 4
    live = prefixes(api, tasks=[TASK], k=3)
    assert picked(live["entries"][0]) == [("growing", 1, 4), ("better", 0, 2), ("sibling", 1, 3)]


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"schedule": {**SCHEDULE, "half_life_steps": 0}}, "schedule.half_life_steps", "greater_than"),
        ({"schedule": {**SCHEDULE, "half_life_steps": -3}}, "schedule.half_life_steps", "greater_than"),
        ({"schedule": {**SCHEDULE, "start_fraction": 1.5}}, "schedule.start_fraction", "less_than_equal"),
        ({"schedule": {**SCHEDULE, "kind": "linear"}}, "schedule.kind", "literal_error"),
        ({"schedule": {**SCHEDULE, "min_fraction": 0.9}}, "schedule", "value_error"),
        ({"step": -1}, "step", "greater_than_equal"),
        ({"k": 0}, "k", "greater_than_equal"),
        ({"trajectories": [{"id": "self"}]}, "body", "value_error"),  # tasks and trajectories both
        ({"tasks": [""]}, "body", "value_error"),
    ],
)
def test_bad_input_names_the_field_and_the_rule(api: TestClient, body: dict[str, Any], field: str, rule: str) -> None:
    request = {"tasks": [TASK], "step": 3, "schedule": SCHEDULE, **body}
    r = api.post(URL, json=request)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["field"], error["rule"]) == (field, rule), error


def test_unknown_trajectories_and_snapshots_are_404s_naming_the_field(api: TestClient) -> None:
    r = api.post(URL, json={"trajectories": [{"id": "self"}, {"id": "nope"}], "step": 0, "schedule": SCHEDULE})
    assert r.status_code == 404 and r.json()["error"]["field"] == "trajectories[1].id"
    r = api.post(URL, json={"tasks": [TASK], "step": 0, "schedule": SCHEDULE, "snapshot": "nope"})
    assert r.status_code == 404 and r.json()["error"]["field"] == "snapshot"


def test_trainers_get_prefixes_agents_may_not(api: TestClient) -> None:
    def key(role: str, namespaces: list[str]) -> dict[str, str]:
        r = api.post("/v1/keys", json={"role": role, "namespaces": namespaces})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['key']}"}

    body = {"tasks": [TASK], "step": 0, "schedule": SCHEDULE}
    assert api.post(URL, json=body, headers=key("trainer", ["lab"])).status_code == 200
    r = api.post(URL, json=body, headers=key("agent", ["lab"]))
    assert r.status_code == 403 and r.json()["error"]["rule"] == "role"
    create_namespace(api, "elsewhere")
    assert api.post(URL, json=body, headers=key("trainer", ["elsewhere"])).status_code == 404
