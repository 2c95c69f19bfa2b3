"""The step fields (domain/steps.py): a request's step becomes ORM column values
(`metadata` under the attribute `metadata_`), and a stored row becomes the plain
mapping prompts and reads use, the same values back through a real store and the
one trajectory reader."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from domain.steps import STEP_FIELDS, step_columns, step_mapping
from store import trajectories as trajectories_repo
from store.models import Step
from store.trajectory_reader import StoredStep, read_step_records
from tests.factories import add_trajectory, make_db


def request_step(observation: str, action: Any, data: dict[str, Any] | None = None, **fields: Any) -> Any:
    """A step as a request carries it (the StepInput protocol), with the request's defaults."""
    values = {"internal_state": None, "result": None, "error": None, "reward": None, "metadata": None}
    values |= {"policy_version": None, "rollout_logprobs": None, "rollout_token_ids": None}
    values |= {"done": False, "truncated": False, "caused_failure": False, **fields}
    return SimpleNamespace(state=SimpleNamespace(observation=observation, data=data), action=action, **values)


FULL = request_step(
    "A locked door.",
    {"tool": "open", "args": {"target": "door"}},
    {"room": 3, "items": ["key", "lamp"]},
    internal_state="find the key",
    result="It is locked.",
    error="door locked",
    reward=-0.5,
    truncated=True,
    caused_failure=True,
    policy_version="ckpt-7",
    rollout_logprobs=[-0.25, -1.5, 0.0],
    rollout_token_ids=[17, 4242, 2],
    metadata={"latency_ms": 12},
)
FULL_MAPPING: dict[str, Any] = {
    "observation": "A locked door.",
    "state_data": {"room": 3, "items": ["key", "lamp"]},
    "internal_state": "find the key",
    "action": {"tool": "open", "args": {"target": "door"}},
    "result": "It is locked.",
    "error": "door locked",
    "reward": -0.5,
    "done": False,
    "truncated": True,
    "caused_failure": True,
    "policy_version": "ckpt-7",
    "rollout_logprobs": [-0.25, -1.5, 0.0],
    "rollout_token_ids": [17, 4242, 2],
    "metadata": {"latency_ms": 12},
}
PLAIN = request_step("Dark.", "wait", done=True)
PLAIN_MAPPING: dict[str, Any] = {
    "observation": "Dark.",
    "state_data": None,
    "internal_state": None,
    "action": "wait",
    "result": None,
    "error": None,
    "reward": None,
    "done": True,
    "truncated": False,
    "caused_failure": False,
    "policy_version": None,
    "rollout_logprobs": None,
    "rollout_token_ids": None,
    "metadata": None,
}


def test_step_columns_are_the_orm_attributes() -> None:
    columns = step_columns(FULL)
    assert list(columns) == [*STEP_FIELDS[:-1], "metadata_"]  # `metadata` is the ORM's metadata_
    assert columns == {**{k: v for k, v in FULL_MAPPING.items() if k != "metadata"}, "metadata_": {"latency_ms": 12}}
    assert set(columns) <= set(Step.__mapper__.attrs.keys())


def test_columns_and_mapping_round_trip_through_a_stored_step(database_url: str) -> None:
    db = make_db(database_url, "mem")
    try:
        with db.write() as s:
            pk = add_trajectory(s, "mem", "t1")
            trajectories_repo.create_steps(
                s,
                [
                    {"trajectory_pk": pk, "index": i, "content_hash": str(i) * 64, **step_columns(step)}
                    for i, step in enumerate([FULL, PLAIN])
                ],
            )
            trajectories_repo.update_trajectory(s, pk, step_count=2)  # as ingest does: readers show counted steps
        with db.read() as s:
            stored = read_step_records(s, "mem", None, [pk], StoredStep)[pk]
        assert [step_mapping(row) for row in stored] == [{"index": 0, **FULL_MAPPING}, {"index": 1, **PLAIN_MAPPING}]
        assert list(step_mapping(stored[0])) == ["index", *STEP_FIELDS]
    finally:
        db.dispose()
