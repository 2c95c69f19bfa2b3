"""Ingest planning: how the steps and trajectories of a request become rows, and
which of them are replays of what is already stored.

Idempotency rules
- A create with an id already stored answers the stored record when the request
  body hashes the same (`request_hash`), and 409 otherwise.
- A step with an explicit `index` below the stored count is a replay when its
  content hashes the same as the stored step, and 409 otherwise; an explicit index
  above the next free one is a gap (409). Steps without an index take the next one.
- An outcome on a closed trajectory is a replay when identical, 409 otherwise.
- Every field of a step is content, its rollout record (`policy_version`,
  `rollout_logprobs`, `rollout_token_ids`) too: re-sent with other log-probs, it
  is a conflict, never silently kept or dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput
from domain.hashing import canonical_hash, task_hash
from domain.steps import step_columns
from service.trajectories.schemas import OutcomeCreate, State, StepCreate, TrajectoryCreate
from store import trajectories as repo
from store.models import utcnow

# Step fields added after steps were first stored: left out of a step's content hash
# (and of the steps in a request hash) when unset, so a retry of a step or a request
# stored before them still replays; when given, they are content like any other
# field, and a different value (other rollout log-probs) is a conflict.
_LATER_STEP_FIELDS = ("policy_version", "rollout_logprobs", "rollout_token_ids")


def _unset_later_fields(step: Any) -> set[str]:
    return {f for f in _LATER_STEP_FIELDS if getattr(step, f) is None}


_HASHED_STEP_FIELDS = tuple(name for name in StepCreate.model_fields if name not in ("index", "state"))
_STATE_FIELDS = tuple(State.model_fields)


def step_hash(step: StepCreate) -> str:
    """The hash of what `step.model_dump(mode="json")` gives without `index` and the
    unset later fields, built from the attributes: a parsed request holds only JSON
    values already, and the dump was half of an append's planning."""
    content = {name: getattr(step, name) for name in _HASHED_STEP_FIELDS}
    for name in _LATER_STEP_FIELDS:
        if content[name] is None:
            del content[name]
    content["state"] = {name: getattr(step.state, name) for name in _STATE_FIELDS}
    return canonical_hash(content)


def step_row(trajectory_pk: int, index: int, step: StepCreate, content_hash: str) -> dict[str, Any]:
    return {"trajectory_pk": trajectory_pk, "index": index, **step_columns(step), "content_hash": content_hash}


def outcome_values(outcome: OutcomeCreate) -> dict[str, Any]:
    return {
        "success": outcome.success,
        "reward": outcome.reward,
        "failure_reason": outcome.failure_reason,
        "outcome_details": outcome.details,
    }


@dataclass
class StepPlan:
    rows: list[dict[str, Any]]
    replayed: int
    next_index: int


def plan_steps(
    session: Session, trajectory_pk: int, stored_count: int, steps: list[StepCreate], field: str
) -> StepPlan:
    """Decide, for each step of an append, whether it is new or a replay."""
    hashes = [step_hash(s) for s in steps]
    explicit_old = [s.index for s in steps if s.index is not None and s.index < stored_count]
    stored_hashes = repo.read_step_hashes(session, trajectory_pk, explicit_old) if explicit_old else {}
    rows: list[dict[str, Any]] = []
    replayed = 0
    next_index = stored_count
    for i, (step, h) in enumerate(zip(steps, hashes, strict=True)):
        index = next_index if step.index is None else step.index
        if index < stored_count:
            if stored_hashes.get(index) != h:
                raise Conflict(
                    f"{field}[{i}]: step {index} is already stored with different content",
                    field=f"{field}[{i}]",
                    rule="idempotent_replay",
                )
            replayed += 1
        elif index < next_index:
            raise InvalidInput(
                f"{field}[{i}].index: step {index} appears twice in this request",
                field=f"{field}[{i}].index",
                rule="unique_index",
            )
        elif index > next_index:
            raise Conflict(
                f"{field}[{i}].index is {index} but the next free index is {next_index}; steps must be contiguous",
                field=f"{field}[{i}].index",
                rule="contiguous_index",
            )
        else:
            rows.append(step_row(trajectory_pk, index, step, h))
            next_index += 1
    return StepPlan(rows=rows, replayed=replayed, next_index=next_index)


def check_new_step_indexes(t: TrajectoryCreate, where: str) -> None:
    """A new trajectory's steps are numbered from 0: an explicit index must say so."""
    for j, step in enumerate(t.steps):
        if step.index is not None and step.index != j:
            raise InvalidInput(
                f"{where}steps[{j}].index is {step.index}; a new trajectory's steps are numbered from 0, "
                f"so it must be {j}",
                field=f"{where}steps[{j}].index",
                rule="contiguous_index",
            )


# Fields added after trajectories were first stored: left out of the request hash
# when unset, so a retry of a request stored before them still replays.
_LATER_FIELDS = ("parent_trajectory_id", "attempt")


def request_hash(t: TrajectoryCreate) -> str:
    """What an idempotent replay of a create must match."""
    body = t.model_dump(mode="json", exclude={f for f in _LATER_FIELDS if getattr(t, f) is None})
    for step, dumped in zip(t.steps, body["steps"], strict=True):
        for name in _unset_later_fields(step):
            del dumped[name]
    return canonical_hash(body)


def trajectory_row(ns: str, t: TrajectoryCreate, request_hash: str, created_by: str) -> dict[str, Any]:
    """The row of a new trajectory (closed when the request carries its outcome)."""
    closed = t.outcome is not None
    row: dict[str, Any] = {
        "namespace": ns,
        "id": t.id,
        "task": t.task,
        "task_hash": task_hash(t.task),
        "environment": t.environment,
        "agent": t.agent,
        "policy_version": t.policy_version,
        "group_id": t.group_id,
        "parent_trajectory_id": t.parent_trajectory_id,
        "attempt": t.attempt,
        "metadata_": t.metadata,
        "retrieval_ids": t.retrieval_ids,
        "status": "closed" if closed else "open",
        "step_count": len(t.steps),
        "request_hash": request_hash,
        "created_by": created_by,
        "closed_at": utcnow() if closed else None,
        "success": None,
        "reward": None,
        "failure_reason": None,
        "outcome_details": None,
    }
    if t.outcome is not None:
        row.update(outcome_values(t.outcome))
    return row
