"""GET /v1/namespaces/{ns}/tasks (curriculum statistics) on SQLite and PostgreSQL:
hand-computed statistics for a small namespace, per task and per (task, policy
version); every sort paged one row at a time; filters; answers pinned by a snapshot
byte for byte; namespace isolation; bad input."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from itertools import product
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.hashing import task_hash
from tests.factories import trajectory
from tests.fixtures import create_namespace, post_trajectory

NS = "/v1/namespaces/cur"
TASKS = f"{NS}/tasks"

# Task texts whose byte order differs from a locale's ("Z" < "a" < "Ü" bytewise).
A, B, C, D, E = "fix the build", "Write a poem", "Ünïcode task", "apple picking", "Zebra count"
NAME = {A: "A", B: "B", C: "C", D: "D", E: "E"}

SORTS = ("learning_signal", "attempts", "success_rate", "reward_var", "last_seen", "task")
GROUP_BYS = ("task", "task,policy_version")


def closed(id: str, task: str, **outcome: Any) -> dict[str, Any]:
    """A closed trajectory body; `outcome` is its outcome ({} closes it with none)."""
    fields = {k: outcome.pop(k) for k in ("group_id", "policy_version", "environment", "agent") if k in outcome}
    return trajectory(id, task=task, outcome=outcome, **fields)


def post_batch(api: TestClient, *bodies: dict[str, Any]) -> None:
    r = api.post(f"{NS}/trajectories/batch", json={"trajectories": list(bodies)})
    assert r.status_code == 201, r.text


def populate(api: TestClient) -> None:
    """One batch per task, so each task's last_seen is later than the one before."""
    create_namespace(api, "cur")
    a = {"environment": "e1", "agent": "x", "policy_version": "v1"}
    post_batch(  # g1 [1, 0], g2 [1, 1]
        api,
        closed("a1", A, success=True, group_id="g1", **a),
        closed("a2", A, success=False, group_id="g1", **a),
        closed("a3", A, success=True, group_id="g2", **a),
        closed("a4", A, success=True, group_id="g2", **a),
    )
    b = {"environment": "e1", "agent": "x"}
    post_batch(  # g3 (v1) rewards [0.2, 0.6]; g4 (v2) [1.0, 0.0, 0.5] and one open
        api,
        closed("b1", B, success=False, reward=0.2, group_id="g3", policy_version="v1", **b),
        closed("b2", B, success=True, reward=0.6, group_id="g3", policy_version="v1", **b),
        closed("b3", B, success=True, reward=1.0, group_id="g4", policy_version="v2", **b),
        closed("b4", B, success=False, reward=0.0, group_id="g4", policy_version="v2", **b),
        closed("b5", B, reward=0.5, group_id="g4", policy_version="v2", **b),
        trajectory("b6", task=B, group_id="g4", policy_version="v2", **b),
    )
    c = {"environment": "e2", "agent": "y"}
    post_batch(api, closed("c1", C, success=True, **c), closed("c2", C, success=False, **c))  # no groups
    post_batch(api, trajectory("d1", task=D, group_id="g6", environment="e2", agent="y"))  # open only
    e = {"environment": "e1", "agent": "z"}
    post_batch(  # a group of one rewarded member (and one attempt with no outcome value)
        api, closed("e1", E, success=True, group_id="g5", **e), closed("e2", E, group_id="g5", **e)
    )


STAT_FIELDS = (
    "attempts",
    "open",
    "successes",
    "failures",
    "rewarded",
    "success_rate",
    "reward_mean",
    "reward_var",
    "groups",
    "mixed_groups",
    "signal_groups",
    "learning_signal",
)


def stats(*values: Any) -> dict[str, Any]:
    return dict(zip(STAT_FIELDS, values, strict=True))


# attempts, open, successes, failures, rewarded, success_rate, reward_mean, reward_var,
# groups, mixed_groups, signal_groups, learning_signal -- by hand:
EXPECTED = {
    # rewards [1, 0, 1, 1]: mean 0.75, var (3·0.0625 + 0.5625)/4; groups: var 0.25 and 0
    A: stats(4, 0, 3, 1, 4, 0.75, 0.75, 0.1875, 2, 1, 2, 0.125),
    # rewards [0.2, 0.6, 1, 0, 0.5]: mean 0.46, var (.0676+.0196+.2916+.2116+.0016)/5;
    # success_rate 2/4 (b5 has no success value); groups: var 0.04 and 1/6
    B: stats(5, 1, 2, 2, 5, 0.5, 0.46, 0.1184, 2, 2, 2, (0.04 + 1 / 6) / 2),
    C: stats(2, 0, 1, 1, 2, 0.5, 0.5, 0.25, 0, 0, 0, None),
    D: stats(0, 1, 0, 0, 0, None, None, None, 1, 0, 0, None),
    E: stats(2, 0, 1, 0, 1, 1.0, 1.0, 0.0, 1, 0, 0, None),
}
EXPECTED_BY_POLICY = {
    (A, "v1"): EXPECTED[A],
    (B, "v1"): stats(2, 0, 1, 1, 2, 0.5, 0.4, 0.04, 1, 1, 1, 0.04),
    (B, "v2"): stats(3, 1, 1, 1, 3, 0.5, 0.5, 1 / 6, 1, 1, 1, 1 / 6),
    (C, None): EXPECTED[C],
    (D, None): EXPECTED[D],
    (E, None): EXPECTED[E],
}


def approx(expected: dict[str, Any]) -> dict[str, Any]:
    return {k: pytest.approx(v, abs=1e-12) if isinstance(v, float) else v for k, v in expected.items()}


def only_stats(item: dict[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in STAT_FIELDS}


def get_all(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    r = api.get(TASKS, params={"limit": 100, **params})
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None
    return r.json()["items"]  # type: ignore[no-any-return]


def walk(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    """Every page at limit=1, following next_cursor to the end."""
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        r = api.get(TASKS, params={"limit": 1, **params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["items"]) <= 1
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("paging did not end")


def sort_value(item: dict[str, Any], sort: str) -> Any:
    value = item[sort]
    return datetime.fromisoformat(value) if sort == "last_seen" else value


def expected_order(items: list[dict[str, Any]], sort: str, order: str) -> list[dict[str, Any]]:
    """The documented order: sort value (nulls last either way), then task_hash and
    policy_version ascending. Python compares str by code point, which is UTF-8
    byte order."""
    by_key = sorted(items, key=lambda i: (i["task_hash"], i["policy_version"] or ""))
    present = [i for i in by_key if i[sort] is not None]
    present.sort(key=lambda i: sort_value(i, sort), reverse=order == "desc")  # stable: ties keep key order
    return present + [i for i in by_key if i[sort] is None]


def key(item: dict[str, Any]) -> tuple[str, str | None]:
    return item["task"], item["policy_version"]


@pytest.fixture
def api(client: TestClient) -> TestClient:
    populate(client)
    return client


def test_statistics_per_task_by_hand(api: TestClient) -> None:
    items = get_all(api)
    assert {i["task"] for i in items} == set(EXPECTED)
    for item in items:
        assert only_stats(item) == approx(EXPECTED[item["task"]]), item["task"]
        assert item["task_hash"] == task_hash(item["task"])
        assert item["policy_version"] is None


def test_statistics_per_task_and_policy_version(api: TestClient) -> None:
    items = get_all(api, group_by="task,policy_version")
    assert {key(i) for i in items} == set(EXPECTED_BY_POLICY)
    for item in items:
        assert only_stats(item) == approx(EXPECTED_BY_POLICY[key(item)]), key(item)


def test_last_seen_is_the_latest_created_or_closed(api: TestClient) -> None:
    r = api.get(f"{NS}/trajectories", params={"limit": 100})
    latest: dict[str, datetime] = {}
    for t in r.json()["items"]:
        times = [datetime.fromisoformat(t["created_at"])]
        times += [datetime.fromisoformat(t["closed_at"])] if t["closed_at"] else []
        latest[t["task"]] = max([*times, latest.get(t["task"], times[0])])
    items = get_all(api, sort="last_seen")
    assert {i["task"]: datetime.fromisoformat(i["last_seen"]) for i in items} == latest
    # One batch per task, in this order: the newest first.
    assert [NAME[i["task"]] for i in items] == ["E", "D", "C", "B", "A"]


def test_default_order_is_learning_signal_desc_with_nulls_last(api: TestClient) -> None:
    items = get_all(api)
    assert [NAME[i["task"]] for i in items[:2]] == ["A", "B"]
    assert [i["task_hash"] for i in items[2:]] == sorted(task_hash(t) for t in (C, D, E))
    ascending = get_all(api, order="asc")
    assert [NAME[i["task"]] for i in ascending[:2]] == ["B", "A"]  # nulls still last
    assert [i["task_hash"] for i in ascending[2:]] == sorted(task_hash(t) for t in (C, D, E))


def test_task_order_is_bytewise_on_both_engines(api: TestClient) -> None:
    assert [NAME[i["task"]] for i in get_all(api, sort="task", order="asc")] == ["B", "E", "D", "A", "C"]
    assert [NAME[i["task"]] for i in get_all(api, sort="task")] == ["C", "A", "D", "E", "B"]


def test_every_sort_pages_one_row_at_a_time_in_order(api: TestClient) -> None:
    for sort, order, group_by in product(SORTS, ("desc", "asc"), GROUP_BYS):
        combo = {"sort": sort, "order": order, "group_by": group_by}
        full = get_all(api, **combo)
        assert len(full) == (5 if group_by == "task" else 6), combo
        assert [key(i) for i in full] == [key(i) for i in expected_order(full, sort, order)], combo
        paged = walk(api, **combo)
        assert paged == full, combo  # the same rows, once each, in the same order
        assert len({key(i) for i in paged}) == len(paged), combo


def test_pages_of_two_end_with_no_cursor(api: TestClient) -> None:
    first = api.get(TASKS, params={"limit": 2, "sort": "attempts"}).json()
    assert [NAME[i["task"]] for i in first["items"]] == ["B", "A"] and first["next_cursor"]
    second = api.get(TASKS, params={"limit": 2, "sort": "attempts", "cursor": first["next_cursor"]}).json()
    third = api.get(TASKS, params={"limit": 2, "sort": "attempts", "cursor": second["next_cursor"]}).json()
    assert len(second["items"]) == 2 and [NAME[i["task"]] for i in third["items"]] == ["D"]
    assert third["next_cursor"] is None


def test_filters(api: TestClient) -> None:
    names = lambda **p: sorted(NAME[i["task"]] for i in get_all(api, **p))  # noqa: E731
    assert names(environment="e2") == ["C", "D"]
    assert names(agent="x") == ["A", "B"]
    assert names(agent="x", environment="e2") == []
    assert names(min_attempts=3) == ["A", "B"]
    assert names(min_attempts=0) == ["A", "B", "C", "D", "E"]
    assert names(min_attempts=2, environment="e2") == ["C"]
    # policy_version restricts the trajectories counted, not only the rows shown.
    (only,) = get_all(api, policy_version="v2")
    assert only["task"] == B and only_stats(only) == approx(EXPECTED_BY_POLICY[(B, "v2")])
    assert names(policy_version="v9") == []


def test_a_snapshot_pins_the_answer_byte_for_byte(api: TestClient) -> None:
    assert api.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    params = {"snapshot": "s1", "limit": 100}
    pinned = api.get(TASKS, params=params)
    split = api.get(TASKS, params={**params, "group_by": "task,policy_version", "sort": "task"})
    pages = walk(api, snapshot="s1", sort="reward_var")
    live = api.get(TASKS, params={"limit": 100})
    assert pinned.status_code == 200 and pinned.json()["snapshot"] == "s1"
    assert pinned.json()["items"] == live.json()["items"] and live.json()["snapshot"] is None

    # The namespace moves on: open rollouts close, more attempts, a new task.
    for id, outcome in (("b6", {"success": True, "reward": 1.0}), ("d1", {"success": False})):
        assert api.post(f"{NS}/trajectories/{id}/outcome", json=outcome).status_code == 200
    post_batch(api, closed("a5", A, success=False, group_id="g2", policy_version="v1"))
    post_trajectory(api, "cur", "f1", task="a new task", outcome={"success": True}, group_id="g7")

    assert api.get(TASKS, params=params).content == pinned.content
    again = api.get(TASKS, params={**params, "group_by": "task,policy_version", "sort": "task"})
    assert again.content == split.content
    assert walk(api, snapshot="s1", sort="reward_var") == pages
    moved = {i["task"]: i for i in get_all(api)}
    assert moved["a new task"]["attempts"] == 1 and moved[B]["open"] == 0 and moved[D]["attempts"] == 1
    assert moved[A]["learning_signal"] == pytest.approx((0.25 + 2 / 9) / 2)  # g2 now [1, 1, 0]
    assert api.get(TASKS, params=params).json()["items"] != get_all(api)
    # A later snapshot sees the new state.
    assert api.post(f"{NS}/snapshots", json={"id": "s2"}).status_code == 201
    assert get_all(api, snapshot="s2") == get_all(api)


def test_reward_variance_is_exact_far_from_zero(client: TestClient) -> None:
    """Rewards near 1e7 differing by 0.2: E[r²] − E[r]² would lose every digit."""
    create_namespace(client, "cur")
    post_batch(
        client,
        closed("r1", "far", reward=1e7 + 0.1, group_id="g"),
        closed("r2", "far", reward=1e7 + 0.3, group_id="g"),
    )
    (item,) = get_all(client)
    assert item["reward_var"] == pytest.approx(0.01, rel=1e-6)
    assert item["learning_signal"] == pytest.approx(0.01, rel=1e-6)
    assert item["success_rate"] is None and item["mixed_groups"] == 0


def test_empty_namespace(client: TestClient) -> None:
    create_namespace(client, "cur")
    assert client.get(TASKS).json() == {"items": [], "next_cursor": None, "snapshot": None}


def test_other_namespaces_and_unknown_snapshots_are_404(api: TestClient) -> None:
    create_namespace(api, "other")
    r = api.post("/v1/keys", json={"role": "trainer", "namespaces": ["other"]})
    assert r.status_code == 201, r.text
    other = {"Authorization": f"Bearer {r.json()['key']}"}
    hidden = api.get(TASKS, headers=other)
    assert hidden.status_code == 404 and hidden.json()["error"]["field"] == "namespace"
    assert api.get("/v1/namespaces/other/tasks", headers=other).json()["items"] == []
    assert api.get("/v1/namespaces/nowhere/tasks").status_code == 404

    unknown = api.get(TASKS, params={"snapshot": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "snapshot"
    assert api.post("/v1/namespaces/other/snapshots", json={"id": "theirs"}).status_code == 201
    foreign = api.get(TASKS, params={"snapshot": "theirs"})
    assert foreign.status_code == 404 and foreign.json()["error"]["field"] == "snapshot"


def b64(body: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("params", "field", "rule"),
    [
        ({"sort": "reward"}, "sort", None),
        ({"order": "up"}, "order", None),
        ({"group_by": "policy_version"}, "group_by", None),
        ({"min_attempts": -1}, "min_attempts", None),
        ({"limit": 0}, "limit", None),
        ({"cursor": "not a cursor!"}, "cursor", "opaque_cursor"),
        ({"cursor": b64([1, 2])}, "cursor", "opaque_cursor"),
        # A cursor issued for another sort, order or grouping.
        ({"cursor": b64({"s": "attempts", "o": "desc", "g": "task", "v": 3, "h": "ab"})}, "cursor", "opaque_cursor"),
        (
            {
                "sort": "attempts",
                "order": "asc",
                "cursor": b64({"s": "attempts", "o": "desc", "g": "task", "v": 3, "h": "x"}),
            },
            "cursor",
            "opaque_cursor",
        ),
        # The right listing, a value of the wrong type.
        (
            {"sort": "attempts", "cursor": b64({"s": "attempts", "o": "desc", "g": "task", "v": "3", "h": "x"})},
            "cursor",
            "opaque_cursor",
        ),
        (
            {"sort": "attempts", "cursor": b64({"s": "attempts", "o": "desc", "g": "task", "v": None, "h": "x"})},
            "cursor",
            "opaque_cursor",
        ),
        (
            {"sort": "last_seen", "cursor": b64({"s": "last_seen", "o": "desc", "g": "task", "v": "noon", "h": "x"})},
            "cursor",
            "opaque_cursor",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(
    api: TestClient, params: dict[str, Any], field: str, rule: str | None
) -> None:
    r = api.get(TASKS, params=params)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field
    if rule is not None:
        assert error["rule"] == rule


def test_a_cursor_built_like_ours_pages_on(api: TestClient) -> None:
    """The cursor format is private, but a hand-made one for the right listing is
    honoured: after B (5 attempts) come A, then the rest."""
    cursor = b64({"s": "attempts", "o": "desc", "g": "task", "v": 5, "h": task_hash(B)})
    items = api.get(TASKS, params={"sort": "attempts", "cursor": cursor}).json()["items"]
    assert [NAME[i["task"]] for i in items][:1] == ["A"] and len(items) == 4
