"""When to try a request again, and how long to wait first.

Retrying writes is safe because every write the client makes is idempotent on the
server: trajectories carry a client-supplied id, steps an explicit index, and an
identical outcome is a replay. The few requests that are not idempotent (a new API
key, steps without indexes, a delete whose repeat would answer 404) are retried only
when the request certainly did not take effect: the connection was never made, or
the server answered 429 / 503, which it does before doing any work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import httpx

#: ``idempotent``: retry every transient failure; ``unsent``: retry only when the
#: request certainly had no effect; ``never``: report the first answer (health probes).
RetryMode = Literal["idempotent", "unsent", "never"]

#: Answered before any work was done: safe to repeat any request.
_NOT_PROCESSED_STATUSES = frozenset({429, 503})
#: Transient, but the request may have been applied (e.g. a gateway timed out waiting).
_MAYBE_PROCESSED_STATUSES = frozenset({500, 502, 504})
#: The connection was never established, so nothing was sent.
_NOT_SENT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
#: Sent, or partly sent, but no answer came back.
_MAYBE_SENT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter.

    Wait ``backoff * 2**attempt`` seconds, capped at ``max_backoff``, of which a
    random half is jitter so that many clients failing together do not retry in
    lockstep. A ``Retry-After`` from the server replaces the computed wait; one
    longer than ``max_backoff`` ends the retries instead, so that a call never
    hangs for minutes on the server's say-so (the error carries the hint).
    """

    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("max_retries, backoff and max_backoff must not be negative")

    def wait(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``, or ``None`` to give up."""
        if attempt >= self.max_retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_backoff else None
        ceiling = min(self.max_backoff, self.backoff * 2.0**attempt)
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def wait_after_status(
        self, status: int, attempt: int, mode: RetryMode, retry_after: float | None = None
    ) -> float | None:
        """The wait before retrying a request answered with error ``status``, or ``None``."""
        if mode == "never":
            return None
        if status in _NOT_PROCESSED_STATUSES or (mode == "idempotent" and status in _MAYBE_PROCESSED_STATUSES):
            return self.wait(attempt, retry_after)
        return None

    def wait_after_exception(self, exc: httpx.TransportError, attempt: int, mode: RetryMode) -> float | None:
        """The wait before retrying a request that got no response, or ``None``."""
        if mode == "never":
            return None
        if isinstance(exc, _NOT_SENT_ERRORS) or (mode == "idempotent" and isinstance(exc, _MAYBE_SENT_ERRORS)):
            return self.wait(attempt)
        return None
