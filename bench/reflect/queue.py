"""The job queue seen from outside, through the jobs table: what is waiting and for
how long (sampled while workers run), and afterwards where the workers' time went.

Reading the table directly (not /readyz) gives per-kind numbers and costs the
server nothing; these are short read-only queries, a few per second.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

from store.database import create_db_engine
from store.models import Job

CLOSED = "trajectory.closed"


def epoch(at: datetime) -> float:
    """Seconds since the epoch; the database gives naive UTC on some engines."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@dataclass
class QueueSample:
    t: float  # seconds since the watch started
    queued: dict[str, int]  # kind -> jobs waiting
    running: int
    done: int
    failed: int
    oldest_s: dict[str, float]  # kind -> how long its oldest waiting job has waited

    @property
    def waiting(self) -> int:
        return sum(self.queued.values()) + self.running


def sample(engine: Engine, t0: float) -> QueueSample:
    now = time.time()
    stmt = select(Job.kind, Job.status, func.count(), func.min(Job.created_at)).group_by(Job.kind, Job.status)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    queued = {kind: n for kind, status, n, _ in rows if status == "queued"}
    oldest = {kind: now - epoch(first) for kind, status, _, first in rows if status == "queued"}
    by_status: dict[str, int] = defaultdict(int)
    for _, status, n, _ in rows:
        by_status[status] += n
    return QueueSample(now - t0, queued, by_status["running"], by_status["done"], by_status["failed"], oldest)


@dataclass
class QueueWatch:
    """Samples the queue every `interval` seconds in a thread until stopped."""

    url: str
    interval: float = 1.0
    samples: list[QueueSample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.engine = create_db_engine(self.url)
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(sample(self.engine, self.t0))
            self._stop.wait(self.interval)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.engine.dispose()

    def latest(self) -> QueueSample:
        return self.samples[-1] if self.samples else sample(self.engine, self.t0)


@dataclass(frozen=True)
class FinishedJob:
    id: int
    kind: str
    created: float  # epoch seconds
    finished: float


def finished_jobs(engine: Engine, after_id: int = 0) -> list[FinishedJob]:
    stmt = (
        select(Job.id, Job.kind, Job.created_at, Job.finished_at)
        .where(Job.id > after_id, Job.status == "done")
        .order_by(Job.finished_at)
    )
    with engine.connect() as conn:
        return [FinishedJob(i, k, epoch(c), epoch(f)) for i, k, c, f in conn.execute(stmt)]


def last_job_id(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.coalesce(func.max(Job.id), 0))).scalar_one())


@dataclass
class KindTime:
    kind: str
    jobs: int
    seconds: float  # wall-clock time attributed to this kind (see attribute)

    @property
    def per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else float("nan")


def attribute(jobs: list[FinishedJob], start: float) -> list[KindTime]:
    """Split the wall-clock from `start` to the last completion between job kinds: the
    gap before each completion goes to the kind that completed. With one worker
    thread that gap is the job's own run time (plus its claim); with more, the
    completions interleave and each kind's share is its share of the drain. The
    kinds' seconds add up to the whole drain, so jobs/s per kind are comparable
    with the overall rate."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    previous = start
    for job in sorted(jobs, key=lambda j: j.finished):
        seconds[job.kind] += max(0.0, job.finished - previous)
        counts[job.kind] += 1
        previous = max(previous, job.finished)
    return [KindTime(kind, counts[kind], seconds[kind]) for kind in sorted(counts, key=lambda k: -seconds[k])]
