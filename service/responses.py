"""What routes share about their answers: an idempotent create's status (201, or
200 for a replay) with its OpenAPI entry, and a read-your-writes wait's 504."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Response
from pydantic import BaseModel

from domain.schemas import ErrorResponse

T = TypeVar("T")

REPLAYED = "an identical request was already applied (idempotent replay)"

CONSISTENCY_TIMEOUT: dict[int | str, dict[str, Any]] = {
    504: {"model": ErrorResponse, "description": "consistency_token not searchable within wait_timeout_ms"}
}


def replay_response(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entry of a create route's 200: the stored resource, answered again."""
    return {200: {"model": model, "description": REPLAYED}}


def created_or_replayed(written: tuple[T, bool], response: Response) -> T:
    """A create's answer, 200 when it was a replay (the route declares 201)."""
    item, created = written
    if not created:
        response.status_code = 200
    return item
