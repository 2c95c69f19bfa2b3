"""Opaque keyset cursors: a base64 of the last row's surrogate key."""

from __future__ import annotations

import base64
import binascii

from service.errors import InvalidInput


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"pk:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = raw.partition(":")
        if kind != "pk":
            raise ValueError(kind)
        return int(value)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            "cursor is not one this server issued; pass next_cursor from the previous page",
            field="cursor",
            rule="opaque_cursor",
        ) from None
