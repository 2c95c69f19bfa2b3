"""Reflection (memory item) schemas for browsing and curation."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from domain.reflections import Kind, Status
from domain.schemas import Page, RequestModel, ResponseModel
from service.retrieval.schemas import EvidenceRead

if TYPE_CHECKING:
    from store.models import Reflection


class ReflectionUtility(ResponseModel):
    uses: int
    successes: int
    failures: int
    reward_sum: float


class ReflectionRead(ResponseModel):
    id: str
    kind: Kind
    status: Status
    version: int
    content: dict[str, Any]
    text: str
    environment: str | None = None
    task: str | None = None
    reflector: str
    reflector_version: str
    model: str | None = None
    evidence_count: int
    evidence_successes: int
    evidence_failures: int
    evidence_value: float | None = Field(None, description="mean value of the evidence (exemplars: return-to-go)")
    utility: ReflectionUtility
    evidence: list[EvidenceRead] = Field(description="newest first; all of it on GET one, the newest 5 in lists")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(  # type: ignore[override]  # a reflection's response needs its evidence too
        cls, row: Reflection, evidence: list[tuple[str, int | None, int | None]]
    ) -> ReflectionRead:
        return cls.model_validate(
            {
                **{name: getattr(row, name) for name in cls.model_fields if name not in ("utility", "evidence")},
                "utility": ReflectionUtility.from_row(row),
                "evidence": [EvidenceRead(trajectory_id=t, step_start=s, step_end=e) for t, s, e in evidence],
            }
        )


class ReflectionPage(Page[ReflectionRead]):
    pass


class ReflectionUpdate(RequestModel):
    """An edit (content/text: a new version, the old one kept in the history) and/or
    a status change (approve, retire, restore)."""

    content: dict[str, Any] | None = None
    text: str | None = Field(None, min_length=1)
    status: Status | None = None
    note: str | None = Field(None, max_length=2000, description="why: kept in the history")
    expected_version: int | None = Field(None, ge=1, description="refuse (409) if someone edited it meanwhile")


class ReflectionVersionRead(ResponseModel):
    version: int
    action: str
    status: Status
    content: dict[str, Any]
    actor: str
    note: str | None = None
    created_at: datetime


class HoldoutArm(ResponseModel):
    units: int = Field(description="episodes (or retrievals without one) in this arm with a success/failure outcome")
    successes: int
    rate: float = Field(description="posterior mean success rate (Beta prior of strength 2 on the baseline)")


class ReflectionEffect(ResponseModel):
    """The item's causal effect on success, from the random holdout (docs/retrieval.md)."""

    reflection_id: str
    holdout_rate: float = Field(description="the namespace's credit.holdout_rate now (0: no new draws)")
    baseline: float = Field(description="the namespace's success rate over all reported retrievals")
    served: HoldoutArm
    withheld: HoldoutArm
    effect: float = Field(description="served rate minus withheld rate, shrunk toward 0 at low support")
    low: float = Field(description="95 % interval, lower end")
    high: float = Field(description="95 % interval, upper end")
    verdict: Literal["helps", "hurts", "unclear"] = Field(description="'helps' / 'hurts' when the interval excludes 0")
