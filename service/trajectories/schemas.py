"""Trajectory and step schemas of the v1 API."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from domain.schemas import ClientId, Label, Page, RequestModel, ResponseModel
from domain.steps import step_mapping

if TYPE_CHECKING:
    from store.trajectory_reader import StoredStep, StoredTrajectory

JSONObject = dict[str, Any]


class State(RequestModel):
    observation: str = Field(description="what the agent observed, as text")
    data: JSONObject | None = Field(None, description="optional structured state")


class StepCreate(RequestModel):
    index: int | None = Field(
        None,
        ge=0,
        description="position in the trajectory; when given it must be the next free index "
        "(or an index already stored with an identical step, which is a harmless replay)",
    )
    state: State
    internal_state: str | None = Field(None, description="the agent's plan / subgoal / thought")
    action: str | JSONObject = Field(description="action text or a tool call object")
    result: str | None = Field(None, description="observation after the action")
    error: str | None = None
    reward: float | None = None
    done: bool = Field(False, description="terminal step")
    truncated: bool = Field(False, description="cut by a time limit (distinct from done)")
    caused_failure: bool = Field(False, description="this step caused the episode's failure")
    policy_version: Label | None = Field(
        None,
        description="the policy that acted at this step, when it differs from step to step (asynchronous RL); "
        "null: the trajectory's policy_version applies (it is not copied here)",
    )
    rollout_logprobs: list[float] | None = Field(
        None,
        description="the inference engine's log-probs of the step's action tokens, one per token, each finite "
        "and <= 0 (send a large negative number for a token the engine gave -inf); at most "
        "limits.max_rollout_tokens_per_step",
    )
    rollout_token_ids: list[int] | None = Field(
        None,
        description="the ids of those tokens (0 <= id < 2^31), as many as rollout_logprobs when both are given",
    )
    metadata: JSONObject | None = None


class OutcomeCreate(RequestModel):
    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: JSONObject | None = None


class TrajectoryCreate(RequestModel):
    id: ClientId | None = Field(None, description="client-supplied id; makes retries idempotent")
    task: str = Field(min_length=1)
    environment: Label | None = None
    agent: Label | None = None
    policy_version: Label | None = None
    group_id: ClientId | None = Field(None, description="sibling rollouts share a group id")
    parent_trajectory_id: ClientId | None = Field(
        None, description="the earlier attempt at this task that this one retries (attempt summaries, attempts export)"
    )
    attempt: int | None = Field(None, ge=1, le=1_000_000, description="which attempt this is (1 = the first)")
    metadata: JSONObject | None = None
    steps: list[StepCreate] = Field(default_factory=list)
    outcome: OutcomeCreate | None = Field(None, description="given: the trajectory is stored closed")
    retrieval_ids: list[ClientId] | None = Field(None, description="retrievals whose items this episode used")


class TrajectoryBatchCreate(RequestModel):
    trajectories: list[TrajectoryCreate] = Field(min_length=1)


class StepsAppend(RequestModel):
    steps: list[StepCreate] = Field(min_length=1)


class StateRead(ResponseModel):
    observation: str
    data: JSONObject | None = None


class StepFields(ResponseModel):
    # What a step says, as every answer that shows steps gives it (a base, not itself
    # in the OpenAPI document).
    index: int
    state: StateRead
    internal_state: str | None = None
    action: str | JSONObject
    result: str | None = None
    error: str | None = None
    reward: float | None = None


class StepRead(StepFields):
    done: bool = False
    truncated: bool = False
    caused_failure: bool = False
    policy_version: str | None = Field(None, description="null: the trajectory's policy_version applies")
    rollout_logprobs: list[float] | None = None
    rollout_token_ids: list[int] | None = None
    metadata: JSONObject | None = None
    created_at: datetime

    @classmethod
    def from_row(cls, row: StoredStep) -> StepRead:
        m = step_mapping(row)
        state = StateRead(observation=m.pop("observation"), data=m.pop("state_data"))
        return cls(**m, state=state, created_at=row.created_at)


class OutcomeRead(ResponseModel):
    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: JSONObject | None = None


class TrajectoryRead(ResponseModel):
    id: str
    namespace: str
    task: str
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    parent_trajectory_id: str | None = None
    attempt: int | None = None
    metadata: JSONObject | None = None
    retrieval_ids: list[str] | None = None
    status: Literal["open", "closed"]
    outcome: OutcomeRead | None = None
    step_count: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None
    steps: list[StepRead] | None = Field(None, description="present when asked for (GET one, include_steps)")

    @classmethod
    def from_row(cls, row: StoredTrajectory, steps: list[StoredStep] | None = None, **extra: Any) -> TrajectoryRead:
        outcome = None
        if row.status == "closed":
            outcome = OutcomeRead(
                success=row.success, reward=row.reward, failure_reason=row.failure_reason, details=row.outcome_details
            )
        return cls(
            id=row.id,
            namespace=row.namespace,
            task=row.task,
            environment=row.environment,
            agent=row.agent,
            policy_version=row.policy_version,
            group_id=row.group_id,
            parent_trajectory_id=row.parent_trajectory_id,
            attempt=row.attempt,
            metadata=row.metadata,
            retrieval_ids=row.retrieval_ids,
            status=row.status,  # type: ignore[arg-type]
            outcome=outcome,
            step_count=row.step_count,
            created_at=row.created_at,
            updated_at=row.updated_at,
            closed_at=row.closed_at,
            steps=None if steps is None else [StepRead.from_row(s) for s in steps],
            **extra,
        )


class TrajectoryPage(Page[TrajectoryRead]):
    pass


class TrajectoryWritten(TrajectoryRead):
    consistency_token: str = Field(description="pass to retrieve for read-your-writes")


class BatchItemResult(ResponseModel):
    id: str
    created: bool = Field(description="false: an identical trajectory was already stored (a replay)")
    step_count: int
    status: Literal["open", "closed"]


class BatchWritten(ResponseModel):
    items: list[BatchItemResult]
    consistency_token: str


class StepsAppended(ResponseModel):
    trajectory_id: str
    step_count: int
    appended: int = Field(description="steps newly stored by this call (replayed ones excluded)")
    consistency_token: str


class TrajectoryDeleted(ResponseModel):
    id: str
    deleted_steps: int
    deleted_reflections: int
