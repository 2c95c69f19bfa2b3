"""Hashes that identify content: task texts (every table keys tasks by this) and
request bodies (idempotent replays compare these)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def task_hash(task: str) -> str:
    return hashlib.sha256(task.encode("utf-8")).hexdigest()[:16]


def canonical_hash(value: Any) -> str:
    """SHA-256 of a JSON value with sorted keys: equal content, equal hash."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()
