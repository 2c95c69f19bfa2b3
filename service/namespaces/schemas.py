"""Namespace schemas of the v1 API (the settings themselves live in domain.settings)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from domain.schemas import NAMESPACE_PATTERN, Page, RequestModel, ResponseModel
from domain.settings import NamespaceSettings


class NamespaceCreate(RequestModel):
    name: str = Field(pattern=NAMESPACE_PATTERN, description="1-63 of a-z 0-9 _ -, starting a-z or 0-9")
    settings: NamespaceSettings = Field(default_factory=NamespaceSettings)


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95
    state_text: dict[str, Any] = Field(default_factory=dict)
    ranking: dict[str, Any] = Field(default_factory=dict)
    credit: dict[str, Any] = Field(default_factory=dict)
    reflection: dict[str, Any] = Field(default_factory=dict)


class LexicalCalibrationRead(ResponseModel):
    """The last check of a namespace's lexical weight against its own near-duplicate
    states (docs/retrieval.md, "The calibrated lexical weight")."""

    weight: float | None = Field(
        None, description="the weight a `calibrated` namespace ranks with; null: none chosen yet (0.5 is used)"
    )
    states: int = Field(description="distinct stored state texts read (the newest exemplars', at most 5,000)")
    near_duplicates: int = Field(description="pairs of them of the same length, 1 to 3 token positions apart")
    queries: int = Field(description="labelled queries built from them (a state with one word changed)")
    ambiguous: int = Field(description="queries dropped: another stored state as near as their own")
    recall_at_1: dict[str, float] = Field(
        default_factory=dict, description="per weight tried, the share of queries whose own state ranked first"
    )
    min_queries: int = Field(description="fewer queries than this choose no weight")
    checked_at: datetime
    calibrated_at: datetime | None = Field(None, description="when the weight was chosen")
    calibrated_states: int | None = Field(None, description="distinct states when the weight was chosen")
    next_check_at: datetime


class NamespaceRead(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
    frozen: bool = Field(False, description="frozen for evaluation: memory does not change until thawed")
    frozen_at: datetime | None = None
    lexical_calibration: LexicalCalibrationRead | None = Field(
        None,
        description="the last lexical calibration (null: never checked; a fixed `lexical_weight` is never checked)",
    )


class NamespacePage(Page[NamespaceRead]):
    pass


class SettingChangeRead(ResponseModel):
    """One setting changed by a save: its dotted path, the value before and after."""

    path: str
    old_value: Any = None
    new_value: Any = None
    actor: str
    created_at: datetime
