"""ORM rows -> API read models (inside the unit of work that loaded them)."""

from __future__ import annotations

from service.trajectories.schemas import (
    OutcomeRead,
    StateRead,
    StepRead,
    TrajectoryRead,
    TrajectoryWritten,
)
from store.models import Step, Trajectory


def step(row: Step) -> StepRead:
    return StepRead(
        index=row.index,
        state=StateRead(observation=row.observation, data=row.state_data),
        internal_state=row.internal_state,
        action=row.action,
        result=row.result,
        error=row.error,
        reward=row.reward,
        done=row.done,
        truncated=row.truncated,
        caused_failure=row.caused_failure,
        metadata=row.metadata_,
        created_at=row.created_at,
    )


def _fields(row: Trajectory) -> dict[str, object]:
    outcome = None
    if row.status == "closed":
        outcome = OutcomeRead(
            success=row.success,
            reward=row.reward,
            failure_reason=row.failure_reason,
            details=row.outcome_details,
        )
    return {
        "id": row.id,
        "namespace": row.namespace,
        "task": row.task,
        "environment": row.environment,
        "agent": row.agent,
        "policy_version": row.policy_version,
        "group_id": row.group_id,
        "metadata": row.metadata_,
        "retrieval_ids": row.retrieval_ids,
        "status": row.status,
        "outcome": outcome,
        "step_count": row.step_count,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "closed_at": row.closed_at,
    }


def trajectory(row: Trajectory, steps: list[Step] | None) -> TrajectoryRead:
    return TrajectoryRead(**_fields(row), steps=None if steps is None else [step(s) for s in steps])


def written(row: Trajectory, token: str) -> TrajectoryWritten:
    return TrajectoryWritten(**_fields(row), consistency_token=token)
