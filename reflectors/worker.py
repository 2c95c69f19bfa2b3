"""The worker loop: claim → commit → work outside any transaction → write the
results and mark the job done in one transaction.

A handler gets the claimed job, does its reads (short read units) and its slow work
(embedding, LLM calls) with no transaction open, and returns a `write` function.
The worker runs that function and `complete_job` in the same write unit, fenced by
the lease: if this worker's lease expired and someone else took the job, nothing is
written. A worker killed mid-job leaves a lease that expires; the job runs again,
and handlers write idempotently, so every job takes effect exactly once.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from domain.jobs import Priority
from store import jobs as jobs_repo
from store.database import Database

log = logging.getLogger("reflexa.worker")

Write = Callable[[Session], None]


class TransientError(Exception):
    """Worth retrying later (rate limit, timeout, 5xx, a database blip)."""


class _LeaseLost(Exception):
    """Raised inside the write unit to roll back results we no longer own."""


@dataclass(frozen=True)
class JobView:
    """What a handler may know of its job (a plain copy: no session attached)."""

    id: int
    namespace: str
    kind: str
    payload: dict[str, Any]
    attempts: int


class Handler(Protocol):
    def __call__(self, job: JobView) -> Write | None: ...


class BatchHandler(Handler, Protocol):
    """A handler that does the slow part of many jobs of its kind at once (one
    encoder call for all of them) and returns one write per job, in order."""

    def run_batch(self, jobs: Sequence[JobView]) -> list[Write | None]: ...


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


@dataclass
class WorkerConfig:
    concurrency: int = 1
    # The last slot of each lane serves jobs waiting longer than this first, so
    # reflection is delayed, never starved, by a flood of indexing work.
    starved_after: float = 5.0
    lease_seconds: float = 300.0
    poll_interval: float = 0.1
    backoff_base: float = 2.0
    backoff_max: float = 300.0
    # One more slot in the fast lane that takes only jobs a reader waits on
    # (Priority.AWAITED): they never wait for the batches the other slots have in flight.
    express_slot: bool = True


class Worker:
    def __init__(
        self,
        db: Database,
        handlers: Mapping[str, Handler],
        config: WorkerConfig | None = None,
        worker_id: str | None = None,
        slow_kinds: Collection[str] = (),
        batch_sizes: Mapping[str, int] | None = None,
    ) -> None:
        self.db = db
        self.handlers = dict(handlers)
        self.slow_kinds = frozenset(slow_kinds)
        # kind -> jobs claimed together once one of that kind is claimed (its handler has run_batch)
        self.batch_sizes = dict(batch_sizes or {})
        self.config = config or WorkerConfig()
        self.worker_id = worker_id or default_worker_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closers: list[Callable[[], None]] = []

    # -- running -----------------------------------------------------------

    def run_once(
        self,
        kinds: list[str] | None = None,
        *,
        limit: int | None = None,
        starved_after: float | None = None,
        holder: str | None = None,
        awaited_only: bool = False,
    ) -> int:
        """Claim and run one round of up to `limit` jobs (default: concurrency) of
        `kinds` (default all) as `holder` (default this worker's id); returns how many.
        `awaited_only`: only jobs a reader waits on (the express slot)."""
        holder = holder or self.worker_id
        with self.db.write() as session:
            claimed = jobs_repo.claim_jobs(
                session,
                worker_id=holder,
                limit=limit or self.config.concurrency,
                lease_seconds=self.config.lease_seconds,
                kinds=kinds or list(self.handlers),
                starved_after=starved_after,
                urgent_priority=int(Priority.AWAITED),
                max_priority=int(Priority.AWAITED) if awaited_only else None,
            )
            batch = self._batch_size(claimed[0].kind) if len(claimed) == 1 else 1
            if batch > 1:  # more of the same kind, in claim order, to share one encoder call
                first = claimed[0]
                awaited = first.priority <= Priority.AWAITED
                claimed += jobs_repo.claim_jobs(
                    session,
                    worker_id=holder,
                    limit=batch - 1,
                    lease_seconds=self.config.lease_seconds,
                    kinds=[first.kind],
                    # a job a reader waits on shares its batch only with its own namespace's
                    namespace=first.namespace if awaited else None,
                )
            views = [JobView(j.id, j.namespace, j.kind, dict(j.payload), j.attempts) for j in claimed]
        if batch > 1:
            self._run_batch(views, holder)
        elif len(views) == 1:
            self._run(views[0], holder)
        elif views:
            with ThreadPoolExecutor(max_workers=len(views)) as pool:
                list(pool.map(lambda view: self._run(view, holder), views))
        return len(views)

    def _batch_size(self, kind: str) -> int:
        """Jobs of this kind to claim together (1 unless its handler runs batches)."""
        has_batches = callable(getattr(self.handlers[kind], "run_batch", None))
        return self.batch_sizes.get(kind, 1) if has_batches else 1

    def run_until_idle(self, max_rounds: int = 10_000) -> int:
        """Drain what is runnable now (tests, `reflexa worker --until-idle`); returns jobs run."""
        total = 0
        for _ in range(max_rounds):
            n = self.run_once()
            if n == 0:
                return total
            total += n
        return total

    def lanes(self) -> list[list[str]]:
        """Job kinds grouped so slow work never holds up fast work: a lane for the
        fast kinds (indexing, offline reflection) and one for `slow_kinds` (LLM calls
        that may take a minute each)."""
        slow = [k for k in self.handlers if k in self.slow_kinds]
        return [lane for lane in (self._fast_kinds(), slow) if lane]

    def _fast_kinds(self) -> list[str]:
        return [k for k in self.handlers if k not in self.slow_kinds]

    def run_forever(
        self, kinds: list[str] | None = None, *, slot: str = "0", ages: bool = False, awaited_only: bool = False
    ) -> None:
        """One slot: claim a job at a time until `stop` (slots never wait for each
        other's jobs; each holds its leases under its own id). `ages`: this slot
        serves starved jobs first; `awaited_only`: only jobs a reader waits on."""
        starved_after = self.config.starved_after if ages else None
        holder = f"{self.worker_id}/{slot}"
        while not self._stop.is_set():
            try:
                n = self.run_once(kinds, limit=1, starved_after=starved_after, holder=holder, awaited_only=awaited_only)
            except OperationalError as exc:  # the database blinked: wait and go on
                log.warning("claiming jobs failed: %s", exc)
                n = 0
            if n == 0:
                self._wake.wait(self.config.poll_interval)
                self._wake.clear()

    def _slots(self) -> list[threading.Thread]:
        """`concurrency` threads per lane, each claiming its own jobs; the last one
        of a lane ages (serves starved jobs first). With `express_slot`, one more in
        the fast lane for the jobs readers wait on."""
        n = self.config.concurrency
        threads = [
            threading.Thread(
                target=self.run_forever,
                args=(lane,),
                kwargs={"slot": f"{i}.{slot}", "ages": slot == n - 1},
                name=f"reflexa-worker-{i}.{slot}",
                daemon=True,
            )
            for i, lane in enumerate(self.lanes())
            for slot in range(n)
        ]
        fast = self._fast_kinds()
        if self.config.express_slot and fast:
            threads.append(
                threading.Thread(
                    target=self.run_forever,
                    args=(fast,),
                    kwargs={"slot": "express", "awaited_only": True},
                    name="reflexa-worker-express",
                    daemon=True,
                )
            )
        return threads

    def start(self) -> None:
        """Run in background threads (the embedded `reflexa serve`)."""
        self._threads = self._slots()
        for thread in self._threads:
            thread.start()

    def serve(self) -> None:
        """Run every slot of every lane until `stop` (a `reflexa worker` process)."""
        self.start()
        for thread in self._threads:
            while thread.is_alive():  # join in slices so signals reach the main thread
                thread.join(0.5)

    @property
    def running(self) -> bool:
        """Background threads were started and are all alive."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def wake(self) -> None:
        """New work was queued in this process: look now instead of at the next poll."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)

    def on_close(self, closer: Callable[[], None]) -> None:
        """Release something the handlers share (an LLM client's connections) at `close`."""
        self._closers.append(closer)

    def close(self) -> None:
        """After `stop`: release what the handlers hold. Idempotent."""
        closers, self._closers = self._closers, []
        for closer in closers:
            try:
                closer()
            except Exception as exc:  # shutting down: log, go on with the rest
                log.warning("closing worker resources failed: %s", exc)

    # -- one job -----------------------------------------------------------

    def _run(self, job: JobView, holder: str) -> None:
        self._settle(job, holder, lambda: self.handlers[job.kind](job))

    def _run_batch(self, jobs: list[JobView], holder: str) -> None:
        """One slow part for all (a failure there fails each job, recorded as usual),
        then each job's write and completion in its own unit."""
        handler = self.handlers[jobs[0].kind]
        try:
            writes = handler.run_batch(jobs)  # type: ignore[attr-defined]
        except Exception as exc:  # recorded on every job of the batch
            for job in jobs:
                self._settle(job, holder, lambda exc=exc: _raise(exc))
            return
        for job, write in zip(jobs, writes, strict=True):
            self._settle(job, holder, lambda write=write: write)

    def _settle(self, job: JobView, holder: str, compute: Callable[[], Write | None]) -> None:
        """Compute the job's write, then write it and mark the job done in one unit,
        fenced by the lease; any failure is recorded on the job."""
        try:
            write = compute()
            with self.db.write() as session:
                if write is not None:
                    write(session)
                if not jobs_repo.complete_job(session, job.id, holder):
                    raise _LeaseLost
        except _LeaseLost:
            log.warning("job %s: lease lost to another worker, results discarded", job.id)
        except Exception as exc:  # every failure is recorded on the job, none is lost
            transient = isinstance(exc, TransientError | OperationalError | TimeoutError | ConnectionError)
            hint = getattr(exc, "retry_after", None)  # e.g. a rate limit's Retry-After
            retry_in = (hint if hint is not None else self._backoff(job.attempts)) if transient else None
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if not transient:
                detail += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-5:])
            log.warning("job %s (%s) attempt %s failed: %s", job.id, job.kind, job.attempts, detail.splitlines()[0])
            with self.db.write() as session:
                jobs_repo.fail_job(session, job.id, holder, detail, retry_in=retry_in)

    def _backoff(self, attempts: int) -> float:
        base = min(self.config.backoff_max, self.config.backoff_base * 2 ** max(0, attempts - 1))
        return base * (0.5 + random.random() / 2)  # jitter: retries from many workers spread out


def _raise(exc: BaseException) -> None:
    raise exc
