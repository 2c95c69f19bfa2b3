"""Cursor paging, one way for every list: opaque keyset cursors (a base64 of the
last row's surrogate key) and a page fetched with one extra row, which says
whether another page follows without a count query."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import TypeVar

from domain.errors import InvalidInput

R = TypeVar("R")
P = TypeVar("P")


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"pk:{pk}".encode()).decode().rstrip("=")


def _decoded(cursor: str, kind: str, parse: Callable[[str], P]) -> P:
    """`parse` of the text after `kind:` in a cursor this server made; anything else
    (not base64, another kind, a ValueError from `parse`) is the client's error."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        got, _, value = raw.partition(":")
        if got != kind:
            raise ValueError(got)
        return parse(value)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            "cursor is not one this server issued; pass next_cursor from the previous page",
            field="cursor",
            rule="opaque_cursor",
        ) from None


def decode_cursor(cursor: str | None) -> int | None:
    return _decoded(cursor, "pk", int) if cursor else None


def keyset_page(
    fetch: Callable[[int | None, int], list[R]], *, cursor: str | None, limit: int, key: Callable[[R], int]
) -> tuple[list[R], str | None]:
    """`fetch(before_pk, n)` returns up to n rows in descending key order, below
    `before_pk` when given. Returns the page and the cursor of the next one (None at
    the end)."""
    rows = fetch(decode_cursor(cursor), limit + 1)
    page = rows[:limit]
    return page, (encode_cursor(key(page[-1])) if len(rows) > limit else None)


def encode_pair_cursor(kind: str, first: str, pk: str) -> str:
    """A cursor for lists ordered by a computed value or a time, then a key: the
    pair as text (floats by repr, so they round-trip exactly)."""
    return base64.urlsafe_b64encode(f"{kind}:{first}|{pk}".encode()).decode().rstrip("=")


def decode_pair_cursor(cursor: str | None, kind: str, parse: Callable[[str, str], P]) -> P | None:
    """`parse(first, pk)` of an `encode_pair_cursor` value (a ValueError from it, or a
    cursor of another kind, is the client's error)."""

    def pair(value: str) -> P:
        first, sep, pk = value.rpartition("|")
        if not sep:
            raise ValueError(value)
        return parse(first, pk)

    return _decoded(cursor, kind, pair) if cursor else None
