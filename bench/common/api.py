"""Talking to a benchmark's server over HTTP: the namespace the suites write into and
the headers of an authenticated request."""

from __future__ import annotations

NAMESPACE = "bench"


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
