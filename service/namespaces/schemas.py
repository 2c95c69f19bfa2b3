"""Namespace schemas."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from service.schemas import NAMESPACE_PATTERN, RequestModel, ResponseModel


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; every field has a default, unknown fields are refused."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")


class NamespaceCreate(RequestModel):
    name: str = Field(pattern=NAMESPACE_PATTERN, description="1-63 of a-z 0-9 _ -, starting a-z or 0-9")
    settings: NamespaceSettings = Field(default_factory=NamespaceSettings)


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95


class NamespaceRead(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
