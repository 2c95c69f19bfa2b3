"""Pre-action check schemas: POST /v1/namespaces/{ns}/check."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from domain.schemas import Label, RequestModel, ResponseModel
from service.retrieval.schemas import RetrieveFilters

JSONObject = dict[str, Any]


def _not_blank(value: Any) -> Any:
    """An action or a state with no text matches nothing: refuse it (422 naming the field)."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty or only whitespace")
    if isinstance(value, dict) and not value:
        raise ValueError("must not be an empty object")
    return value


class CheckState(RequestModel):
    observation: str = Field(description="what the agent observes now, as text (not empty)")
    data: JSONObject | None = Field(None, description="optional structured state")

    _observation = field_validator("observation")(_not_blank)


class CheckRequest(RequestModel):
    state: CheckState
    internal_state: str | None = Field(None, description="the agent's current plan / subgoal, matched separately")
    task: str | None = None
    action: str | JSONObject = Field(
        description="the action about to be taken: text, or a tool call object (as a step's action)"
    )
    environment: Label | None = Field(None, description="only history from this environment")
    k: int = Field(
        50, ge=1, le=100, description="how many exemplars (state, action pairs) nearest the state are considered"
    )
    min_similarity: float = Field(
        0.8,
        ge=-1.0,
        le=1.0,
        description="states like this: an exemplar counts when the cosine of its environment state with this "
        "one is at least this (an exact match always counts; the internal state only ranks)",
    )
    filters: RetrieveFilters = Field(default_factory=RetrieveFilters)
    consistency_token: str | None = Field(None, description="from a write: wait until it is searchable")
    wait_timeout_ms: int = Field(5000, ge=0, le=60_000, description="how long to wait for consistency_token")

    _action = field_validator("action")(_not_blank)


class CheckRisk(ResponseModel):
    rate: float | None = Field(description="failures / attempts; null when no attempt of this action was credited")
    low: float | None = Field(description="the 95% Wilson score interval of `rate`, lower bound")
    high: float | None = Field(description="the 95% Wilson score interval of `rate`, upper bound")
    failures: int = Field(description="debited steps: the step that caused a failed episode")
    attempts: int = Field(
        description="credited steps: successes + failures (a failed episode's other steps are neither)"
    )


class CheckEvidence(ResponseModel):
    exemplar_id: str = Field(description="the merged exemplar this step is evidence of (retrieval item_ids)")
    trajectory_id: str
    step_index: int | None
    similarity: float = Field(description="the cosine of the exemplar's environment state with the query's")
    exact_match: bool
    success: bool | None = Field(description="the step's credit: true credited, false debited, null neither")
    result: str | None = Field(None, description="the step's result (the observation after the action)")
    error: str | None = None


class CheckAlternative(ResponseModel):
    action: str | JSONObject
    success_rate: float | None = Field(description="successes / attempts; null with no credited attempt")
    low: float | None = Field(description="95% Wilson lower bound of success_rate (the sort key)")
    high: float | None
    successes: int
    failures: int
    attempts: int
    support: int = Field(description="stored steps that took this action in states like this")


class CheckHeuristic(ResponseModel):
    id: str
    text: str


class CheckResponse(ResponseModel):
    risk: CheckRisk
    support: int = Field(description="stored steps that took this action in states like this, credited or not")
    exact_match: bool = Field(description="this action was taken before in exactly this state")
    states: int = Field(description="exemplars (state, action pairs) of states like this that were considered")
    evidence: list[CheckEvidence] = Field(
        description="the steps behind `risk`: exact state first, then by similarity; within an exemplar "
        "failures first; at most 20"
    )
    alternatives: list[CheckAlternative] = Field(
        description="other actions taken in states like this, best first by the Wilson lower bound of success"
    )
    heuristics: list[CheckHeuristic] = Field(
        description="active heuristics whose trigger or guideline names this action (at most 20)"
    )
    retrieval_id: str | None = Field(
        None, description="the logged retrieval of the exemplars (report an outcome for it naming item_ids)"
    )
    waited_ms: int = Field(0, description="time spent waiting for consistency_token")
