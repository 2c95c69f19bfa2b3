"""API key schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from domain.schemas import RequestModel, ResponseModel

Role = Literal["admin", "operator", "agent", "trainer"]


class KeyCreate(RequestModel):
    role: Role
    namespaces: list[str] = Field(min_length=1, description='namespace names this key may touch, or ["*"] for all')
    description: str | None = Field(None, max_length=200)


class KeyRead(ResponseModel):
    id: str
    role: Role
    namespaces: list[str]
    description: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None
    expires_at: datetime | None = Field(None, description="set by a rotation: refused from then on")
    last_used_at: datetime | None = Field(None, description="when it last authenticated (to within a minute)")


class KeyCreated(KeyRead):
    key: str = Field(description="the secret; shown only in this response")


MAX_GRACE_SECONDS = 30 * 24 * 3600


class KeyRotate(RequestModel):
    grace_seconds: int = Field(
        3600,
        ge=0,
        le=MAX_GRACE_SECONDS,
        description="how long the old key stays valid beside the new one (0: refused at once)",
    )
    description: str | None = Field(None, max_length=200, description="the new key's (default: the old key's)")
