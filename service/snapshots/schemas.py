"""Snapshot and freeze schemas."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from domain.schemas import ClientId, Page, RequestModel, ResponseModel


class SnapshotCreate(RequestModel):
    id: ClientId | None = Field(None, description="client-supplied id; makes retries idempotent")
    note: str | None = Field(None, max_length=2000)


class SnapshotRead(ResponseModel):
    id: str
    namespace: str
    watermark: int = Field(description="the namespace's change-feed position when it was taken")
    note: str | None = None
    reflection_count: int
    trajectory_count: int
    step_count: int
    created_by: str | None = None
    created_at: datetime


class SnapshotPage(Page[SnapshotRead]):
    pass


class FreezeRead(ResponseModel):
    namespace: str
    frozen: bool
    frozen_at: datetime | None = None
