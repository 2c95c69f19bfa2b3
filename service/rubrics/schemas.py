"""Rubric, rubric score and reward capability schemas (docs/trainers.md, "Rubric
rewards"; the fixed names of DESIGN.md's trainer surface: criteria [{id, text,
weight, check?}], score -> {reward, criteria: [{id, score, weight, method,
rationale?}]}, OpenRLHF's {query, prompts, labels} -> {rewards, scores, extra_logs})."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.schemas import ClientId, Label, Page, RequestModel, ResponseModel
from service.trajectories.schemas import TrajectoryCreate

JSONObject = dict[str, Any]

CHECK_DESCRIPTION = (
    "a rule that decides the criterion; null: an LLM judges it. {type: regex|contains|not_contains|json_path|"
    "numeric|tool_called|max_steps, …}; see docs/trainers.md for each type's fields and the scopes"
)


class CriterionCreate(RequestModel):
    id: ClientId = Field(description="unique within the rubric; names the criterion in scores")
    text: str = Field(min_length=1, max_length=2_000, description="the criterion, judgeable from the trajectory")
    weight: float = Field(ge=0, description="its share of the reward (weights need not sum to 1; not all 0)")
    check: JSONObject | None = Field(None, description=CHECK_DESCRIPTION)
    stage: Label | None = Field(None, description="score it on the steps whose metadata.stage is this only")
    rationale: str | None = Field(None, max_length=2_000, description="why it matters (kept, not scored)")


class RubricCreate(RequestModel):
    id: ClientId = Field(description="client-supplied: a retry with the same body is a replay")
    name: str = Field(min_length=1, max_length=200)
    criteria: list[CriterionCreate] = Field(min_length=1, max_length=100)
    task: str | None = Field(None, min_length=1, description="the task it judges: retrieval matches it by this")
    environment: Label | None = None
    status: Literal["candidate", "active"] = Field("active", description="served by retrieval when active")


class CriterionRead(ResponseModel):
    id: str
    text: str
    weight: float
    check: JSONObject | None = Field(None, description="as stored; null: judged by an LLM")
    stage: str | None = None
    method: Literal["rule", "llm"]


class RubricRead(ResponseModel):
    id: str
    namespace: str
    name: str
    status: str
    version: int
    criteria: list[CriterionRead]
    text: str
    task: str | None = None
    environment: str | None = None
    reflector: str = Field(description="who wrote it: api (POST …/rubrics) or llm_rubrics (the reflector)")
    created_at: datetime
    updated_at: datetime


# -- scoring ----------------------------------------------------------------------


class ScoreItem(RequestModel):
    """One trajectory to score: a stored one by id, or an inline one (the body of
    POST …/trajectories, not stored)."""

    trajectory_id: ClientId | None = Field(None, description="a stored trajectory")
    trajectory: TrajectoryCreate | None = Field(None, description="an inline trajectory (not stored)")
    final_answer: str | JSONObject | None = Field(
        None, description="what `final_answer` checks read; default: the last step's action"
    )
    label: Any = Field(
        None,
        description="the ground truth filled into `{{label}}` in checks and shown to the judge; default: "
        "a stored trajectory's metadata.label",
    )

    @model_validator(mode="after")
    def _one_trajectory(self) -> ScoreItem:
        if (self.trajectory_id is None) == (self.trajectory is None):
            raise ValueError("give trajectory_id (a stored trajectory) or trajectory (an inline one), not both")
        return self


class ScoreRequest(ScoreItem):
    snapshot: ClientId | None = Field(None, description="read the rubric and stored trajectories as pinned")
    skip_judged: bool = Field(
        False, description="with no LLM configured, skip judged criteria (method 'skipped') instead of a 503"
    )


class ScoreBatchRequest(RequestModel):
    """A rollout group (or any batch) scored with one rubric."""

    items: list[ScoreItem] = Field(min_length=1)
    snapshot: ClientId | None = None
    skip_judged: bool = False


class CriterionScoreRead(ResponseModel):
    id: str
    score: float | None = Field(description="in [0, 1] (rules: 0 or 1); null when skipped")
    weight: float
    method: Literal["rule", "llm", "skipped"]
    rationale: str | None = None
    stage: str | None = None


class StageScoreRead(ResponseModel):
    stage: str
    steps: list[int] = Field(description="the indexes of the stage's steps")
    reward: float | None
    criteria: list[CriterionScoreRead]


class ScoreRead(ResponseModel):
    rubric_id: str
    rubric_version: int
    trajectory_id: str | None = None
    reward: float | None = Field(description="sum(weight * score) / sum(weight) over the scored criteria")
    criteria: list[CriterionScoreRead]
    stages: list[StageScoreRead] = Field(description="per metadata.stage of the steps (RubricEM); empty without")


class ScoreBatchRead(ResponseModel):
    rubric_id: str
    rubric_version: int
    items: list[ScoreRead]
    reward_mean: float | None = Field(description="the mean reward of the items that have one")


# -- reward capabilities (OpenRLHF) ---------------------------------------------------


class CapabilityCreate(RequestModel):
    note: str | None = Field(None, max_length=500, description="what it is for (a training run)")


class CapabilityRead(ResponseModel):
    id: str
    namespace: str
    rubric_id: str
    note: str | None = None
    created_by: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class CapabilityCreated(CapabilityRead):
    secret: str = Field(description="shown once: only its SHA-256 is stored")
    path: str = Field(description="POST here (no Authorization header): /v1/reward/<secret>")


class CapabilityPage(Page[CapabilityRead]):
    pass


class OpenRLHFRequest(BaseModel):
    """What OpenRLHF's remote reward model client POSTs (--remote_rm_url). Unknown
    fields are ignored: a newer OpenRLHF may send more."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    query: list[str] = Field(description="prompt + response, as OpenRLHF decoded them")
    prompts: list[str] | None = Field(None, description="the prompts, one per query")
    labels: list[Any] | None = Field(None, description="the ground truths, one per query")


class OpenRLHFResponse(ResponseModel):
    rewards: list[float]
    scores: list[float] = Field(description="the same values, in [0, 1] (OpenRLHF's dynamic filtering reads them)")
    extra_logs: dict[str, list[float]] = Field(description="rubric/<criterion id>: its score per query")
