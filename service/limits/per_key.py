"""Per-key abuse limits: request rate (a token bucket) and concurrent requests, each
answered with 429 and Retry-After, counted in /metrics.

A caller is known by a SHA-256 of its credential (the bearer key, or the UI session
cookie); the secret itself is never kept. Invalid keys are limited like valid ones,
so guessing keys is slowed too. Requests without a credential (health, metrics,
reward capability URLs) are not limited here. The limits hold per process: with N
API processes a key may reach N times them (docs/reliability.md). Pure ASGI: the
cost on the hot path is one hash and a dictionary lookup."""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

import orjson
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from domain.errors import TooManyRequests

MAX_TRACKED = 100_000  # callers remembered; the least recently seen is forgotten first
SESSION_COOKIE = b"reflexa_session="


@dataclass
class _Caller:
    tokens: float
    updated: float
    in_flight: int = 0


def _identity(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return hashlib.sha256(value).digest()
    for name, value in scope["headers"]:
        if name == b"cookie" and SESSION_COOKIE in value:
            start = value.index(SESSION_COOKIE) + len(SESSION_COOKIE)
            return hashlib.sha256(value[start:].split(b";", 1)[0]).digest()
    return None


class KeyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, rate: float, burst: int, max_concurrent: int, refused: Counter | None = None
    ) -> None:
        self.app = app
        self.rate = rate
        self.burst = float(max(burst, 1))
        self.max_concurrent = max_concurrent
        self.refused = refused
        self.callers: OrderedDict[bytes, _Caller] = OrderedDict()

    def _caller(self, identity: bytes, now: float) -> _Caller:
        caller = self.callers.get(identity)
        if caller is None:
            caller = self.callers[identity] = _Caller(self.burst, now)
            while len(self.callers) > MAX_TRACKED:
                oldest, value = next(iter(self.callers.items()))
                if value.in_flight:  # never forget a caller mid-request
                    self.callers.move_to_end(oldest)
                    break
                del self.callers[oldest]
        else:
            self.callers.move_to_end(identity)
        return caller

    def _check(self, caller: _Caller, now: float) -> TooManyRequests | None:
        if self.max_concurrent and caller.in_flight >= self.max_concurrent:
            return TooManyRequests(
                f"this key has {caller.in_flight} requests in flight; at most {self.max_concurrent} at once",
                retry_after=1,
                field="authorization",
                rule="max_concurrent_requests_per_key",
            )
        if self.rate > 0:
            caller.tokens = min(self.burst, caller.tokens + (now - caller.updated) * self.rate)
            caller.updated = now
            if caller.tokens < 1.0:
                return TooManyRequests(
                    f"this key is over {self.rate:g} requests per second (bursts of {self.burst:g})",
                    retry_after=max(1, math.ceil((1.0 - caller.tokens) / self.rate)),
                    field="authorization",
                    rule="requests_per_second_per_key",
                )
            caller.tokens -= 1.0
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.rate <= 0 and self.max_concurrent <= 0):
            await self.app(scope, receive, send)
            return
        identity = _identity(scope)
        if identity is None:
            await self.app(scope, receive, send)
            return
        now = time.monotonic()
        caller = self._caller(identity, now)
        error = self._check(caller, now)
        if error is not None:
            if self.refused is not None:
                self.refused.labels(error.rule or "").inc()
            body = orjson.dumps(error.to_body())
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(error.retry_after).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        caller.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            caller.in_flight -= 1
