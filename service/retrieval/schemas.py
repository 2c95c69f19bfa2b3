"""Retrieval and outcome-credit schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from domain.reflections import KINDS, Kind, Status
from domain.schemas import ClientId, Label, RequestModel, ResponseModel
from service.trajectories.schemas import State


class RetrieveFilters(RequestModel):
    agent: Label | None = Field(None, description="only items with evidence from this agent")
    policy_version: Label | None = Field(None, description="only items with evidence from this policy version")
    status: list[Status] = Field(default_factory=lambda: ["active"], min_length=1)
    exclude_tasks: list[str] = Field(
        default_factory=list, description="leakage guard: drop items with any evidence from these tasks"
    )
    exclude_trajectory_ids: list[ClientId] = Field(
        default_factory=list, description="leakage guard: drop items with any evidence from these trajectories"
    )
    as_of: datetime | None = Field(None, description="only items that existed at this time", strict=False)


class RenderOptions(RequestModel):
    format: Literal["text", "markdown", "json"] = "markdown"
    max_chars: int = Field(4000, ge=100, le=200_000, description="the context block never exceeds this")


class RetrieveRequest(RequestModel):
    state: State
    internal_state: str | None = Field(None, description="the agent's current plan / subgoal, matched separately")
    task: str | None = None
    environment: Label | None = Field(None, description="only items from this environment")
    kinds: list[Kind] = Field(default_factory=lambda: list(KINDS), min_length=1)
    k: int = Field(10, ge=1, le=100)
    min_score: float | None = Field(None, description="drop items scoring below this")
    mmr_lambda: float | None = Field(
        None, ge=0.0, le=1.0, description="diversify with MMR: 1 = pure relevance, 0 = pure novelty"
    )
    filters: RetrieveFilters = Field(default_factory=RetrieveFilters)
    render: RenderOptions | None = Field(None, description="ask for a ready-to-inject context block")
    trajectory_id: ClientId | None = Field(
        None, description="the episode this retrieval serves; its outcome will credit the items"
    )
    step: int | None = Field(
        None,
        ge=0,
        description="the index of the episode's step this retrieval serves (the step taken with its answer); "
        "logged with the query, so the operator UI shows the retrieval beside that step",
    )
    snapshot: ClientId | None = Field(
        None,
        description="answer from this snapshot's memory (deterministic: the same request, the same bytes); "
        "not logged, so there is no retrieval_id to credit",
    )
    consistency_token: str | None = Field(None, description="from a write: wait until it is searchable")
    wait_timeout_ms: int = Field(5000, ge=0, le=60_000, description="how long to wait for consistency_token")


class EvidenceRead(ResponseModel):
    trajectory_id: str
    step_start: int | None = None
    step_end: int | None = None


class UtilityRead(ResponseModel):
    mean: float = Field(description="posterior mean success rate when served (Beta, centred on the baseline)")
    std: float = Field(description="posterior standard deviation: the uncertainty of `mean`")
    uses: int
    successes: int
    failures: int
    baseline: float = Field(description="the namespace's success rate over all reported retrievals")


class RetrievedItem(ResponseModel):
    id: str
    kind: Kind
    status: Status
    version: int
    content: dict[str, Any]
    text: str
    score: float = Field(
        description="the rank: similarity, adjusted by utility and recency within ranking.similarity_band; "
        "an exact match of the query state scores above every other item"
    )
    similarity: float = Field(
        description="raw cosine of the state match (joint with internal state when both have one)"
    )
    lexical_similarity: float | None = Field(
        None, description="word overlap of the state texts (cosine of their word sets); null without a lexical text"
    )
    exact_match: bool = Field(
        False, description="the item's state (and internal state, when the query gave one) is the query's, exactly"
    )
    state_similarity: float
    internal_similarity: float | None = None
    utility: UtilityRead
    evidence: list[EvidenceRead]
    evidence_count: int
    environment: str | None = None
    created_at: datetime
    updated_at: datetime


class RetrieveResponse(ResponseModel):
    retrieval_id: str | None = Field(description="the logged retrieval to report an outcome for; null under a snapshot")
    items: list[RetrievedItem]
    context: str | None = None
    gamma: float = Field(description="the discount used for return_to_go in exemplar items")
    waited_ms: int = Field(0, description="time spent waiting for consistency_token")


class RetrieveBatchRequest(RequestModel):
    requests: list[RetrieveRequest] = Field(
        min_length=1,
        description="one retrieve per state, each with its own filters (at most limits.max_batch_retrievals)",
    )


class RetrieveBatchResponse(ResponseModel):
    results: list[RetrieveResponse] = Field(description="in the order of `requests`, each with its own retrieval_id")


class RetrievalOutcomeCreate(RequestModel):
    success: bool | None = None
    reward: float | None = None
    trajectory_id: ClientId | None = None
    details: dict[str, Any] | None = None
    item_ids: list[str] | None = Field(
        None,
        max_length=1000,
        description="credit only these served items (the ones the agent acted on); default: every served item",
    )


class RetrievalOutcomeRead(ResponseModel):
    retrieval_id: str
    success: bool | None = None
    reward: float | None = None
    credited_items: int
