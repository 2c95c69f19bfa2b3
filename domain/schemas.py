"""Schema bases shared by every domain: request models forbid unknown fields and
coerce nothing (a wrong type is an error, not a guess); response models ignore
unknown fields so old clients survive new ones.

Names: `XCreate` (a new X), `XUpdate` (all optional, applied with exclude_unset),
`XRead` (what is returned), `XPage` (a page of XRead with the next cursor). A row
becomes a response one way: `XRead.from_row(row)`, by attribute name unless the
model says otherwise.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
ID_RULE = "1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit"
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"

ClientId = Annotated[str, Field(pattern=ID_PATTERN, description=ID_RULE)]
Label = Annotated[str, Field(min_length=1, max_length=200)]


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ResponseModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @classmethod
    def from_row(cls, row: Any) -> Self:
        """The response for an ORM row (read inside the unit of work that loaded it)."""
        return cls.model_validate(row, from_attributes=True)


T = TypeVar("T")


class Page(ResponseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(None, description="pass as `cursor` for the next page; null at the end")


class ErrorDetail(ResponseModel):
    type: str = Field(description="what kind of error: invalid_input, unauthorized, not_found, conflict, …")
    message: str
    field: str | None = Field(None, description="the field at fault, as a path (`steps[3].state.observation`)")
    rule: str | None = Field(None, description="the rule it broke, machine-readable")
    errors: list[dict[str, Any]] | None = Field(None, description="every problem, for schema errors")


class ErrorResponse(ResponseModel):
    """The one shape of every error answer (docs/api.md, "Errors")."""

    error: ErrorDetail


_ERRORS = {
    400: "the body is not JSON in UTF-8",
    401: "missing, malformed, unknown, revoked or expired key",
    403: "the key's role may not do this",
    404: "no such namespace (or not the key's), resource or route",
    408: "the request body took too long to arrive",
    409: "a conflict: same id with another body, a frozen namespace, a stale version, …",
    413: "the body is larger than the limit",
    422: "invalid input: the field and the rule are named",
    429: "the key is over its rate or concurrency limit (see Retry-After)",
    502: "an upstream the request needs (a teacher endpoint) answered badly",
    503: "something the request needs is not available",
    504: "waited too long: for an upstream, or for a write to become searchable",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": description} for code, description in _ERRORS.items()
}
