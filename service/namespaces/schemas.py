"""Namespace schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.schemas import NAMESPACE_PATTERN, RequestModel, ResponseModel

StateField = Literal["task", "observation", "data"]


class StateTextSettings(RequestModel):
    """How a state becomes the text that is embedded and matched (docs/retrieval.md).
    The agent's internal state is embedded separately, never folded in here."""

    fields: list[StateField] = Field(
        default_factory=lambda: ["observation", "data"],
        min_length=1,
        description="what goes into the state text, in order: the task, the observation text, "
        "the structured state data (as sorted `key: value` lines)",
    )
    max_chars: int = Field(2000, ge=100, le=100_000, description="state text is cut to this before embedding")


class RankingSettings(RequestModel):
    """Weights of the retrieval ranking (docs/retrieval.md)."""

    internal_weight: float = Field(
        0.3, ge=0.0, le=1.0, description="weight of the internal-state match when query and item both have one"
    )
    utility_weight: float = Field(0.5, ge=0.0, le=2.0, description="how far utility moves the score")
    recency_weight: float = Field(0.1, ge=0.0, le=1.0, description="share of the score that decays with age")
    recency_half_life_days: float = Field(30.0, gt=0.0, description="age at which recency counts half")


class ContrastiveSettings(RequestModel):
    """The offline contrastive-heuristics reflector (docs/reflection.md)."""

    enabled: bool = True
    similarity: float = Field(0.85, ge=0.5, le=1.0, description="cosine that puts two states in one neighbourhood")
    min_support: int = Field(5, ge=1, description="attempts an action needs before it becomes a heuristic")
    min_confidence: float = Field(0.5, ge=0.0, le=1.0, description="Wilson lower bound the rate must reach")
    min_lift: float = Field(0.2, ge=0.0, le=1.0, description="how much better a 'prefer' action must do")


class EvidenceCardSettings(RequestModel):
    enabled: bool = True
    groups: int = Field(3, ge=1, le=100, description="latest rollout groups a task's card draws on")


class ReflectionSettings(RequestModel):
    contrastive: ContrastiveSettings = Field(default_factory=ContrastiveSettings)
    evidence_cards: EvidenceCardSettings = Field(default_factory=EvidenceCardSettings)


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; every field has a default, unknown fields are refused."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")
    state_text: StateTextSettings = Field(default_factory=StateTextSettings)
    ranking: RankingSettings = Field(default_factory=RankingSettings)
    reflection: ReflectionSettings = Field(default_factory=ReflectionSettings)


class NamespaceCreate(RequestModel):
    name: str = Field(pattern=NAMESPACE_PATTERN, description="1-63 of a-z 0-9 _ -, starting a-z or 0-9")
    settings: NamespaceSettings = Field(default_factory=NamespaceSettings)


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95
    state_text: dict[str, Any] = Field(default_factory=dict)
    ranking: dict[str, Any] = Field(default_factory=dict)
    reflection: dict[str, Any] = Field(default_factory=dict)


def parse_settings(stored: dict[str, Any]) -> NamespaceSettings:
    """Stored settings with today's defaults filled in (older rows lack newer fields)."""
    return NamespaceSettings.model_validate(stored, strict=False)


class NamespaceRead(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
