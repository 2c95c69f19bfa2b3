"""A namespace at a glance: trajectories and success rate per day, reflections by
kind and status, the queue by kind, retrieval volume and latency.

The per-day counts of the days before today are the costly part (grouped scans of
every trajectory and every logged retrieval of the window: ~0.2 s at 1M steps) and
barely move: a row is only ever added today, so a past day changes only when an old
trajectory closes or is deleted, or the log is purged. They are kept per namespace
for `PAST_DAYS_TTL_S`; today's counts are read on every view."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from domain.reflections import KINDS, STATUSES
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.operator.repository import overview as repo
from service.operator.repository import review as review_repo
from service.operator.repository.overview import DayCount, QueueRow
from service.retrieval import ranking
from store import retrievals as retrievals_repo
from store.database import Database
from store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.operator.review import ReviewRuleFactory

LATENCY_SAMPLE = 1000  # p50/p95 over the newest retrievals
PAST_DAYS_TTL_S = 60.0  # how stale a day before today may be on the overview


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Overview:
    namespace: str
    days: list[str]
    trajectories: list[DayCount]  # one per day in `days`, zeros filled in
    retrievals: list[DayCount]
    reflections: dict[tuple[str, str], int]
    kinds: tuple[str, ...]
    statuses: tuple[str, ...]
    queue: list[QueueRow]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_sample: int
    baseline: float
    outcomes: int
    review_count: int
    frozen: bool

    @property
    def failed_jobs(self) -> int:
        return sum(q.failed for q in self.queue)

    @property
    def queued_jobs(self) -> int:
        return sum(q.queued for q in self.queue)

    @property
    def oldest_queued_seconds(self) -> float | None:
        ages = [q.oldest_queued_seconds for q in self.queue if q.oldest_queued_seconds is not None]
        return max(ages) if ages else None

    def reflection_total(self, kind: str | None = None, status: str | None = None) -> int:
        return sum(
            n
            for (k, s), n in self.reflections.items()
            if (kind is None or k == kind) and (status is None or s == status)
        )


@dataclass(frozen=True)
class _PastDays:
    """A namespace's per-day counts for [first, today), read at `read_at` (monotonic)."""

    first: datetime
    today: datetime
    read_at: float
    trajectories: list[DayCount]
    retrievals: list[DayCount]


def _fill(days: list[str], rows: list[DayCount]) -> list[DayCount]:
    by_day = {r.day: r for r in rows}
    return [by_day.get(d, DayCount(d, 0, 0)) for d in days]


class OverviewService:
    def __init__(self, db: Database, namespaces: NamespaceService, review_rule: ReviewRuleFactory) -> None:
        self.db = db
        self.namespaces = namespaces
        self.review_rule = review_rule
        self._past: dict[str, _PastDays] = {}  # per namespace; replaced whole, never mutated

    def queue(self, principal: Principal, ns: str) -> list[QueueRow]:
        principal.require(Permission.JOBS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            return repo.list_queue_by_kind(session, ns)

    def overview(self, principal: Principal, ns: str, *, days: int = 30, now: datetime | None = None) -> Overview:
        for permission in (Permission.TRAJECTORIES_READ, Permission.REFLECTIONS_READ, Permission.JOBS_READ):
            principal.require(permission, ns)
        now = now or utcnow()
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        first = today - timedelta(days=days - 1)
        day_names = [(first + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(days)]
        settings, successes, total = self.namespaces.ranking_inputs(ns)
        baseline = ranking.baseline_rate(successes, total)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            past = self._past_days(session, ns, first, today)
            latencies = repo.list_recent_latencies(session, ns, LATENCY_SAMPLE)
            trajectories = past.trajectories + repo.list_trajectories_by_day(session, ns, today)
            retrievals = past.retrievals + repo.list_retrievals_by_day(session, ns, today)
            return Overview(
                namespace=ns,
                days=day_names,
                trajectories=_fill(day_names, trajectories),
                retrievals=_fill(day_names, retrievals),
                reflections=repo.count_reflections_by_kind_status(session, ns),
                kinds=tuple(KINDS),
                statuses=tuple(STATUSES),
                queue=repo.list_queue_by_kind(session, ns),
                latency_p50_ms=quantile(latencies, 0.5),
                latency_p95_ms=quantile(latencies, 0.95),
                latency_sample=len(latencies),
                baseline=baseline,
                outcomes=total,
                review_count=review_repo.count_review_queue(
                    session, ns, self.review_rule(baseline, retrievals_repo.list_holdout_counts(session, ns))
                ),
                frozen=self.namespaces.is_frozen(session, ns),
            )

    def _past_days(self, session: Session, ns: str, first: datetime, today: datetime) -> _PastDays:
        """The counts of [first, today), from the cache while fresh and for the same window."""
        kept = self._past.get(ns)
        fresh = kept is not None and time.monotonic() - kept.read_at < PAST_DAYS_TTL_S
        if kept is not None and fresh and (kept.first, kept.today) == (first, today):
            return kept
        read_at = time.monotonic()
        past = _PastDays(
            first,
            today,
            read_at,
            repo.list_trajectories_by_day(session, ns, first, today),
            repo.list_retrievals_by_day(session, ns, first, today),
        )
        self._past[ns] = past
        return past
