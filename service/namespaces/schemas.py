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


class NamespaceRead(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
    frozen: bool = Field(False, description="frozen for evaluation: memory does not change until thawed")
    frozen_at: datetime | None = None


class NamespacePage(Page[NamespaceRead]):
    pass


class SettingChangeRead(ResponseModel):
    """One setting changed by a save: its dotted path, the value before and after."""

    path: str
    old_value: Any = None
    new_value: Any = None
    actor: str
    created_at: datetime
