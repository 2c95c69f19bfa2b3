"""Job queue schemas (operators)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import field_validator

from domain.schemas import Page, ResponseModel

JobStatus = Literal["queued", "running", "done", "failed"]


class JobRead(ResponseModel):
    id: str
    kind: str
    status: JobStatus
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    last_error: str | None = None
    locked_by: str | None = None
    run_after: datetime
    lease_expires_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value  # ids are strings in the API


class JobPage(Page[JobRead]):
    pass
