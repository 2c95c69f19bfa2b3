"""store.records: a record dataclass from a row's attributes of the same names."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from store.records import record_columns, record_from


@dataclass(frozen=True)
class Pair:
    id: str
    count: int
    note: str | None


def test_a_record_takes_the_rows_attributes_named_like_its_fields() -> None:
    row = SimpleNamespace(id="a", count=3, note=None, other="not a field")
    assert record_columns(Pair) == ("id", "count", "note")
    assert record_from(Pair, row) == Pair("a", 3, None)


def test_given_fields_are_not_read_from_the_row() -> None:
    row = SimpleNamespace(id="a", count=3)  # no `note` column
    assert record_from(Pair, row, note="given") == Pair("a", 3, "given")


def test_a_column_the_row_lacks_is_an_error() -> None:
    with pytest.raises(AttributeError, match="note"):
        record_from(Pair, SimpleNamespace(id="a", count=3))
