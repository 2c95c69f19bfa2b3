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
