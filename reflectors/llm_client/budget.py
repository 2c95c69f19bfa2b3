"""Token budgets: a cap on what one namespace may spend on the LLM per UTC day, so a
burst of trajectories (or a runaway trainer) cannot run up an unbounded bill or
starve other namespaces on a shared GPU server.

The client reserves an estimate before each request and records the real usage
after it. `TokenBudget` is the contract; `SqlTokenBudget` (what the service uses) is
shared by every worker process through a row per namespace and day;
`InMemoryTokenBudget` is the per-process one for tools and tests.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol

from reflectors.llm_client.errors import LLMBudgetExceeded
from store import llm_usage
from store.database import Database

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text and BPE tokenizers


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (len/4, rounded up): good enough to decide whether
    a call fits the budget; the recorded spend uses the server's real counts."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def seconds_until_next_utc_day(now: datetime) -> float:
    """How long until the budget of `now`'s UTC day renews."""
    tomorrow = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), time(0), tzinfo=UTC)
    return (tomorrow - now).total_seconds()


def _check(namespace: str, limit: int, committed: int, requested: int, now: datetime) -> None:
    """Refuse (until the next UTC day) a request that would pass a non-zero limit."""
    if limit and committed + requested > limit:
        raise LLMBudgetExceeded(
            namespace, limit=limit, spent=committed, requested=requested, retry_after=seconds_until_next_utc_day(now)
        )


@dataclass(frozen=True)
class Reservation:
    """What `reserve` granted: the day is fixed at reservation time, so a call that
    crosses midnight is settled on the day it was allowed on."""

    namespace: str
    day: date
    tokens: int


class TokenBudget(Protocol):
    """Per-namespace, per-UTC-day token accounting.

    `reserve` raises `LLMBudgetExceeded` when the day's spend (plus what is reserved
    and not yet recorded, if the implementation holds reservations) plus
    `estimated_tokens` would pass the limit. `record` settles a reservation with the
    tokens actually used (0 when the request failed before the server did any work).
    An implementation may hold reservations (no overshoot by concurrent calls) or only
    check them (overshoot bounded by the calls in flight); callers cannot tell the
    difference, so a SQL implementation can choose the simpler one.
    """

    def reserve(self, namespace: str, estimated_tokens: int) -> Reservation: ...

    def record(self, reservation: Reservation, used_tokens: int) -> None: ...


class InMemoryTokenBudget:
    """Per-process budget: counts per (namespace, UTC day), reservations held until
    recorded. With several worker processes each has its own count, so the effective
    cap is the limit times the number of processes; a shared SQL budget avoids that.

    `limit_per_day` 0 means unlimited (spend is still counted, for `spent_today`).
    """

    def __init__(self, limit_per_day: int, *, clock: Callable[[], datetime] | None = None) -> None:
        if limit_per_day < 0:
            raise ValueError("limit_per_day must be 0 (unlimited) or positive")
        self.limit_per_day = limit_per_day
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._spent: dict[tuple[str, date], int] = {}
        self._held: dict[tuple[str, date], int] = {}

    def reserve(self, namespace: str, estimated_tokens: int) -> Reservation:
        now = self._clock()
        day = now.astimezone(UTC).date()
        key = (namespace, day)
        with self._lock:
            self._forget_before(day)
            committed = self._spent.get(key, 0) + self._held.get(key, 0)
            _check(namespace, self.limit_per_day, committed, estimated_tokens, now)
            self._held[key] = self._held.get(key, 0) + estimated_tokens
        return Reservation(namespace, day, estimated_tokens)

    def record(self, reservation: Reservation, used_tokens: int) -> None:
        key = (reservation.namespace, reservation.day)
        with self._lock:
            self._held[key] = max(0, self._held.get(key, 0) - reservation.tokens)
            self._spent[key] = self._spent.get(key, 0) + used_tokens

    def spent_today(self, namespace: str) -> int:
        """Tokens recorded for `namespace` on the current UTC day (reservations excluded)."""
        day = self._clock().astimezone(UTC).date()
        with self._lock:
            return self._spent.get((namespace, day), 0)

    def _forget_before(self, day: date) -> None:
        """Drop past days so a long-running worker does not grow without bound."""
        for counts in (self._spent, self._held):
            for key in [k for k in counts if k[1] < day]:
                del counts[key]


class SqlTokenBudget:
    """Budget shared by every process on the database: `reserve` checks the day's
    recorded spend in SQL, `record` adds to it in one upsert. Reservations are not
    held (a worker killed mid-call would leak them until midnight), so concurrent
    calls can overshoot the limit by at most what they are about to spend.

    `limit_per_day` 0 means unlimited (spend is still recorded).
    """

    def __init__(self, db: Database, limit_per_day: int, *, clock: Callable[[], datetime] | None = None) -> None:
        if limit_per_day < 0:
            raise ValueError("limit_per_day must be 0 (unlimited) or positive")
        self.db = db
        self.limit_per_day = limit_per_day
        self._clock = clock or (lambda: datetime.now(UTC))

    def reserve(self, namespace: str, estimated_tokens: int) -> Reservation:
        now = self._clock()
        day = now.astimezone(UTC).date()
        if self.limit_per_day:
            _check(namespace, self.limit_per_day, self.spent_on(namespace, day), estimated_tokens, now)
        return Reservation(namespace, day, estimated_tokens)

    def record(self, reservation: Reservation, used_tokens: int) -> None:
        if used_tokens <= 0:
            return  # the call failed before the server did any work: nothing to count
        self.db.run_write(
            lambda session: llm_usage.update_tokens_spent(session, reservation.namespace, reservation.day, used_tokens)
        )

    def spent_on(self, namespace: str, day: date) -> int:
        with self.db.read() as session:
            return llm_usage.read_tokens_spent(session, namespace, day)

    def spent_today(self, namespace: str) -> int:
        return self.spent_on(namespace, self._clock().astimezone(UTC).date())
