"""store.trajectory_reader, the one reader of trajectories and steps, on SQLite and
PostgreSQL: every filter field, keyset bounds, column sets, reads of more ids than
one IN list holds, and reads pinned by a snapshot (outcome, step count and
existence as they were)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from store import snapshots as snapshots_repo
from store import trajectory_reader as reader
from store.database import Database
from store.trajectory_reader import TrajectoryFilter
from tests.factories import step, trajectory
from tests.fixtures import create_namespace

NS = "reader"


@dataclass(frozen=True)
class _Step:
    """A record type for read_step_records: its fields are step columns."""

    index: int
    observation: str
    action: Any


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.resolved_database_url)
    yield database
    database.engine.dispose()


def post(client: TestClient, body: dict[str, Any]) -> None:
    r = client.post(f"/v1/namespaces/{NS}/trajectories", json=body)
    assert r.status_code == 201, r.text


def ids(rows: list[Any]) -> list[str]:
    return [row["id"] for row in rows]


@pytest.fixture
def stored(client: TestClient) -> TestClient:
    """Six trajectories of two tasks over two groups and two environments."""
    create_namespace(client, NS)
    post(
        client,
        trajectory("a1", task="A", group_id="g1", environment="e1", steps=[step("s0"), step("s1")], success=True),
    )
    post(client, trajectory("a2", task="A", group_id="g1", environment="e1", steps=[step("s0")], success=False))
    post(client, trajectory("a3", task="A", group_id="g2", environment="e2", steps=[step("s0")]))  # open
    post(client, trajectory("b1", task="B", environment="e2", steps=[step("x")], success=True))  # no group
    post(client, trajectory("b2", task="B", group_id="g2", environment="e1", parent_trajectory_id="b1", success=False))
    post(client, trajectory("b3", task="B", agent="bot", policy_version="v2", success=True))
    return client


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (TrajectoryFilter(), ["a1", "a2", "a3", "b1", "b2", "b3"]),
        (TrajectoryFilter(environment="e1"), ["a1", "a2", "b2"]),
        (TrajectoryFilter(group_id="g2"), ["a3", "b2"]),
        (TrajectoryFilter(group_ids=("g1", "g2")), ["a1", "a2", "a3", "b2"]),
        (TrajectoryFilter(task="B"), ["b1", "b2", "b3"]),
        (TrajectoryFilter(success=False), ["a2", "b2"]),
        (TrajectoryFilter(status="open"), ["a3"]),
        (TrajectoryFilter(with_outcome=True), ["a1", "a2", "b1", "b2", "b3"]),
        (TrajectoryFilter(with_parent=True), ["b2"]),
        (TrajectoryFilter(agent="bot", policy_version="v2"), ["b3"]),
        (TrajectoryFilter(exclude_ids=("a1", "b3")), ["a2", "a3", "b1", "b2"]),
        # an ungrouped trajectory is never excluded by group
        (TrajectoryFilter(exclude_group_ids=("g1", "g2")), ["b1", "b3"]),
        (TrajectoryFilter(environment="e1", success=True, status="closed"), ["a1"]),
    ],
)
def test_each_filter_field(stored: TestClient, db: Database, where: TrajectoryFilter, expected: list[str]) -> None:
    with db.read() as session:
        assert ids(reader.read_trajectories(session, NS, None, where)) == expected


def test_task_hash_and_created_bounds(stored: TestClient, db: Database) -> None:
    with db.read() as session:
        rows = reader.read_trajectories(session, NS, None)
        by_id = {row["id"]: row for row in rows}
        task_b = by_id["b1"]["task_hash"]
        assert ids(reader.read_trajectories(session, NS, None, TrajectoryFilter(task_hash=task_b))) == [
            "b1",
            "b2",
            "b3",
        ]
        created = sorted(row["created_at"] for row in rows)
        after = reader.read_trajectories(session, NS, None, TrajectoryFilter(created_after=created[-1]))
        before = reader.read_trajectories(session, NS, None, TrajectoryFilter(created_before=created[0]))
    assert set(ids(after)) <= set(by_id) and "b3" in ids(after)
    assert before == []


def test_keyset_bounds_order_and_limit(stored: TestClient, db: Database) -> None:
    with db.read() as session:
        pks = {row["id"]: row["pk"] for row in reader.read_trajectories(session, NS, None)}
        page = reader.read_trajectories(session, NS, None, after_pk=pks["a2"], limit=2)
        newest = reader.read_trajectories(session, NS, None, before_pk=pks["b2"], newest_first=True, limit=2)
    assert ids(page) == ["a3", "b1"]
    assert ids(newest) == ["b1", "a3"]


def test_ids_and_columns(stored: TestClient, db: Database) -> None:
    with db.read() as session:
        rows = reader.read_trajectories(session, NS, None, ids=["b2", "a1", "nope"], columns=("id", "status", "reward"))
        none = reader.read_trajectories(session, NS, None, ids=[])
    assert [dict(row) for row in rows] == [
        {"id": "a1", "status": "closed", "reward": None},
        {"id": "b2", "status": "closed", "reward": None},
    ]
    assert none == []


def test_more_ids_and_pks_than_one_in_list_holds(
    stored: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "MAX_IN", 2)
    with db.read() as session:
        rows = reader.read_trajectories(session, NS, None, ids=["b3", "a1", "a2", "a3", "b1"])
        steps = reader.read_steps(session, NS, None, [row["pk"] for row in rows])
    assert sorted(ids(rows)) == ["a1", "a2", "a3", "b1", "b3"]
    assert sorted(len(s) for s in steps.values()) == [0, 1, 1, 1, 2]


def test_steps_in_order_with_a_column_set(stored: TestClient, db: Database) -> None:
    with db.read() as session:
        pk = reader.read_trajectories(session, NS, None, ids=["a1"])[0]["pk"]
        steps = reader.read_steps(
            session, NS, None, [pk], columns=("trajectory_pk", "index", "observation", "metadata")
        )
        records = reader.read_step_records(session, NS, None, [pk], _Step)
    assert [dict(s) for s in steps[pk]] == [
        {"trajectory_pk": pk, "index": 0, "observation": "s0", "metadata": None},
        {"trajectory_pk": pk, "index": 1, "observation": "s1", "metadata": None},
    ]
    assert records == {pk: [_Step(0, "s0", "a"), _Step(1, "s1", "a")]}


def test_a_snapshot_pins_outcome_steps_and_existence(stored: TestClient, db: Database) -> None:
    assert stored.post(f"/v1/namespaces/{NS}/snapshots", json={"id": "s1"}).status_code == 201
    # after the snapshot: a3 gets a step and closes, a new trajectory arrives
    r = stored.post(f"/v1/namespaces/{NS}/trajectories/a3/steps", json={"steps": [step("later")]})
    assert r.status_code == 200, r.text
    assert stored.post(f"/v1/namespaces/{NS}/trajectories/a3/outcome", json={"success": True}).status_code == 200
    post(stored, trajectory("c1", task="C", success=True))
    with db.read() as session:
        snapshot_pk = snapshots_repo.read_snapshot(session, NS, "s1").pk  # type: ignore[union-attr]
        pinned = {row["id"]: row for row in reader.read_trajectories(session, NS, snapshot_pk)}
        live = {row["id"]: row for row in reader.read_trajectories(session, NS, None)}
        pinned_open = reader.read_trajectories(session, NS, snapshot_pk, TrajectoryFilter(status="open"))
        pk = live["a3"]["pk"]
        pinned_steps = reader.read_steps(session, NS, snapshot_pk, [pk])[pk]
        live_steps = reader.read_steps(session, NS, None, [pk])[pk]
    assert "c1" not in pinned and "c1" in live
    assert (pinned["a3"]["status"], pinned["a3"]["success"], pinned["a3"]["step_count"]) == ("open", None, 1)
    assert (live["a3"]["status"], live["a3"]["success"], live["a3"]["step_count"]) == ("closed", True, 2)
    assert ids(pinned_open) == ["a3"]
    assert [s["observation"] for s in pinned_steps] == ["s0"]
    assert [s["observation"] for s in live_steps] == ["s0", "later"]
