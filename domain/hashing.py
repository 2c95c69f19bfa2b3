"""Hashes that identify content: task texts (every table keys tasks by this),
embedded texts (an exact match of a query state; a vector reused for the same
text) and request bodies (idempotent replays compare these)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def task_hash(task: str) -> str:
    return hashlib.sha256(task.encode("utf-8")).hexdigest()[:16]


def text_hash(text: str) -> str:
    """128 bits of SHA-256 of an embedded text (state text, internal state, task text)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def canonical_hash(value: Any) -> str:
    """SHA-256 of a JSON value with sorted keys: equal content, equal hash."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()
