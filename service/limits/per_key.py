"""Per-key abuse limits: request rate (a token bucket) and concurrent requests, each
answered with 429 and Retry-After, counted in /metrics.

A caller is known by a SHA-256 of its credential (the bearer key, or the UI session
cookie); the secret itself is never kept. Invalid keys are limited like valid ones,
so guessing keys is slowed too. Requests without a credential (health, metrics,
reward capability URLs) are not limited here. Pure ASGI.

The rate's bucket is per process, or (`limits.key_limits_scope`, shared by default on
PostgreSQL) one bucket per key in the database that every process draws on: a
process takes a lease of LEASE_SECONDS worth of tokens in one short write and spends
it locally, so N replicas admit the configured rate in total and the hot path stays
a dictionary lookup between leases. Concurrent requests are limited per process."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from prometheus_client import Counter
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from domain.errors import TooManyRequests
from store import key_buckets
from store.database import Database

log = logging.getLogger(__name__)

MAX_TRACKED = 100_000  # callers remembered; the least recently seen is forgotten first
SESSION_COOKIE = b"reflexa_session="
LEASE_SECONDS = 0.05  # a shared lease is this long's worth of the rate: one write per 50 requests at 1,000/s
LEASE_TTL = 1.0  # an unspent lease older than this is dropped (never spent late: a lease may undercount, not over)
IDLE_BUCKET_SECONDS = 3600.0  # shared buckets untouched this long are deleted (they would be full again)
CLEAN_EVERY = 1000  # leases between two cleanups, per process
_UNAVAILABLE = object()  # a lease claim's outcome when the database could not be asked


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class _Caller:
    bucket: _Bucket  # this process's bucket, or (shared scope) the lease and when it was taken
    in_flight: int = 0
    fallback: _Bucket | None = None  # shared scope: the process's own bucket while the database cannot be asked
    # shared scope: the lease one of this caller's requests is taking (its outcome: None
    # when it took tokens, the tokens left when the bucket was empty, _UNAVAILABLE)
    claiming: asyncio.Future[object] | None = None
    # shared scope: the tokens the bucket had left when a claim found it empty, and when
    empty_left: float = 1.0
    empty_since: float = 0.0


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
        self,
        app: ASGIApp,
        *,
        rate: float,
        burst: int,
        max_concurrent: int,
        refused: Counter | None = None,
        shared: Callable[[], Database] | None = None,
    ) -> None:
        """`shared`: the database holding the shared buckets (None: buckets per process)."""
        self.app = app
        self.rate = rate
        self.burst = float(max(burst, 1))
        self.max_concurrent = max_concurrent
        self.refused = refused
        self.shared = shared
        self.lease = max(1, min(int(self.burst), math.ceil(rate * LEASE_SECONDS)))
        self.leases = 0
        self.callers: OrderedDict[bytes, _Caller] = OrderedDict()

    def _caller(self, identity: bytes, now: float) -> _Caller:
        caller = self.callers.get(identity)
        if caller is None:
            # (shared: the tokens are a lease, none until one is taken)
            caller = self.callers[identity] = _Caller(_Bucket(0.0 if self.shared else self.burst, now))
            while len(self.callers) > MAX_TRACKED:
                oldest, value = next(iter(self.callers.items()))
                if value.in_flight:  # never forget a caller mid-request
                    self.callers.move_to_end(oldest)
                    break
                del self.callers[oldest]
        else:
            self.callers.move_to_end(identity)
        return caller

    def _too_many_in_flight(self, caller: _Caller) -> TooManyRequests | None:
        if self.max_concurrent and caller.in_flight >= self.max_concurrent:
            return TooManyRequests(
                f"this key has {caller.in_flight} requests in flight; at most {self.max_concurrent} at once",
                retry_after=1,
                field="authorization",
                rule="max_concurrent_requests_per_key",
            )
        return None

    def _over_rate(self, tokens_left: float) -> TooManyRequests:
        return TooManyRequests(
            f"this key is over {self.rate:g} requests per second (bursts of {self.burst:g})",
            retry_after=max(1, math.ceil((1.0 - tokens_left) / self.rate)),
            field="authorization",
            rule="requests_per_second_per_key",
        )

    def _local_rate(self, bucket: _Bucket, now: float) -> TooManyRequests | None:
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            return self._over_rate(bucket.tokens)
        bucket.tokens -= 1.0
        return None

    async def _shared_rate(self, identity: bytes, caller: _Caller) -> TooManyRequests | None:
        """Spend one token of the caller's lease, taking a new lease when it is spent
        or stale. One request of a caller takes it; the caller's other requests wait
        for that one instead of each taking a lease of its own, which the bucket
        would pay for and this process would drop (at 16 concurrent clients the
        bucket emptied at a sixth of the configured rate)."""
        while True:
            now = time.monotonic()
            lease = caller.bucket
            if lease.tokens >= 1.0 and now - lease.updated <= LEASE_TTL:
                lease.tokens -= 1.0
                return None
            # The bucket was empty at the last claim and cannot have refilled a token
            # since (other processes only take from it): refuse without asking again.
            refilled = caller.empty_left + (now - caller.empty_since) * self.rate
            if refilled < 1.0:
                return self._over_rate(refilled)
            if caller.claiming is None:
                break
            outcome = await asyncio.shield(caller.claiming)
            if outcome is _UNAVAILABLE:
                return self._local_rate(self._fallback(caller, now), now)
            if outcome is not None:  # the claim found the bucket empty: so it is for this request
                return self._over_rate(outcome)
        assert self.shared is not None
        claiming = caller.claiming = asyncio.get_running_loop().create_future()
        outcome: float | object | None = None
        try:
            taken, left = await run_in_threadpool(self._claim, self.shared(), identity.hex())
        except SQLAlchemyError as exc:
            # The database cannot be asked: fall back to this process's own bucket
            # rather than refuse a key for an outage (the route answers it anyway).
            log.warning("shared key limit unavailable (%s); this process's bucket applies", type(exc).__name__)
            outcome = _UNAVAILABLE
            return self._local_rate(self._fallback(caller, now), now)
        else:
            lease.tokens, lease.updated = float(taken), time.monotonic()
            if taken < 1:
                caller.empty_left, caller.empty_since = left, lease.updated
                outcome = left
                return self._over_rate(left)
            lease.tokens -= 1.0
            return None
        finally:
            caller.claiming = None
            claiming.set_result(outcome)  # the waiters: spend the lease, or take this answer

    def _fallback(self, caller: _Caller, now: float) -> _Bucket:
        if caller.fallback is None:
            caller.fallback = _Bucket(self.burst, now)
        return caller.fallback

    def _claim(self, db: Database, identity: str) -> tuple[int, float]:
        now = time.time()  # wall clock: the processes share it, not their monotonic clocks
        self.leases += 1
        clean = self.leases % CLEAN_EVERY == 0

        def work(session: Session) -> tuple[int, float]:
            if clean:
                key_buckets.delete_idle(session, now - IDLE_BUCKET_SECONDS)
            return key_buckets.claim(session, identity, self.lease, rate=self.rate, burst=self.burst, now=now)

        return db.run_write(work)

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
        error = self._too_many_in_flight(caller)
        if error is None and self.rate > 0:
            if self.shared is None:
                error = self._local_rate(caller.bucket, now)
            else:
                error = await self._shared_rate(identity, caller)
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
