"""Plain frozen records from rows: a record is a dataclass whose fields are columns
(of a table, a view or a query), so its columns are written once, in its fields,
and a caller keeps it after its session closes."""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


@cache
def record_columns(record: type[Any]) -> tuple[str, ...]:
    """The columns a record dataclass holds: its field names."""
    return tuple(f.name for f in fields(record))


def record_from(record: type[T], row: Any, **given: Any) -> T:
    """`record` from the attributes of `row` (an ORM object or a result row) named
    like its fields; `given` holds the fields the row has no column for."""
    values = {name: getattr(row, name) for name in record_columns(record) if name not in given}
    return record(**values, **given)
