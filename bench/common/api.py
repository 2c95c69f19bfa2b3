"""Talking to a benchmark's server over HTTP: the namespace the suites write into, the
headers of an authenticated request, a retrieve's body, and waiting on a write's
consistency token."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

NAMESPACE = "bench"


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def retrieve_body(text: str, k: int, **extra: Any) -> bytes:
    """POST …/retrieve's body: a state with this observation, the top `k`, then `extra`."""
    return orjson.dumps({"state": {"observation": text}, "k": k, **extra})


def wait_token(client: httpx.Client, ns: str, token: str, text: str, k: int, deadline_s: float) -> httpx.Response:
    """Retrieve with the consistency token until it answers (504: not yet) or `deadline_s`
    has passed; the last answer either way."""
    end = time.monotonic() + deadline_s
    body = retrieve_body(text, k, consistency_token=token, wait_timeout_ms=30_000)
    while True:
        r = client.post(f"/v1/namespaces/{ns}/retrieve", content=body)
        if r.status_code != 504 or time.monotonic() > end:
            return r
