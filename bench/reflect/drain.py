"""Part (a) of bench.reflect: a backlog of closed trajectories ingested with no
worker running, then worker processes started and the queue timed until empty.

The backlog is ingested once per backend through the real API (worker off), and
each worker setup drains its own copy of that database, so every setup starts from
the same queue.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from bench.common.api import NAMESPACE, headers
from bench.common.cpu import CpuSample, CpuUse, tree_cpu_seconds, wait_for_quiet
from bench.common.databases import Databases
from bench.common.output import progress
from bench.common.processes import API_ONLY_ENV, server, workers
from bench.reflect.queue import KindTime, QueueSample, QueueWatch, attribute, finished_jobs
from bench.reflect.workload import Trajectory
from migrations import upgrade
from store.database import create_db_engine
from store.models import Embedding, Reflection
from store.models import Trajectory as TrajectoryRow


@dataclass(frozen=True)
class Setup:
    """How many `reflexa worker` processes, each running how many jobs at once."""

    processes: int
    concurrency: int

    @property
    def label(self) -> str:
        procs = "1 process" if self.processes == 1 else f"{self.processes} processes"
        return f"{procs} × concurrency {self.concurrency}"

    @classmethod
    def parse(cls, text: str) -> Setup:
        """'2x1' = 2 processes, concurrency 1."""
        processes, concurrency = text.lower().split("x")
        return cls(int(processes), int(concurrency))


def post_batch(client: httpx.Client, trajectories: list[Trajectory]) -> str:
    """Ingest closed trajectories in one request; returns its consistency token."""
    r = client.post(
        f"/v1/namespaces/{NAMESPACE}/trajectories/batch", content=orjson.dumps({"trajectories": trajectories})
    )
    r.raise_for_status()
    return str(r.json()["consistency_token"])


@dataclass
class IngestResult:
    trajectories: int
    steps: int
    seconds: float


def ingest_backlog(url: str, work: Path, groups: Iterable[list[Trajectory]], batch: int) -> IngestResult:
    """Every group through `POST …/trajectories/batch` (whole groups, about `batch`
    trajectories a request) into the API tier alone: no worker, so every job waits."""
    upgrade(url)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    trajectories = steps = 0
    started = time.perf_counter()
    with (
        server(url, key, work, env=API_ONLY_ENV) as srv,
        httpx.Client(base_url=srv.url, headers=headers(key), timeout=300) as client,
    ):
        client.post("/v1/namespaces", json={"name": NAMESPACE}).raise_for_status()
        pending: list[Trajectory] = []
        for group in groups:
            pending += group
            if len(pending) >= batch:
                post_batch(client, pending)
                trajectories += len(pending)
                steps += sum(len(t["steps"]) for t in pending)
                pending = []
        if pending:
            post_batch(client, pending)
            trajectories += len(pending)
            steps += sum(len(t["steps"]) for t in pending)
    return IngestResult(trajectories, steps, time.perf_counter() - started)


@dataclass
class DrainResult:
    backend: str
    setup: Setup
    jobs: int
    failed: int
    trajectories: int
    steps: int
    startup_s: float  # workers started -> first job done (process start, model load)
    drain_s: float  # workers started -> last job done
    exemplars: int
    vectors: int  # exemplar vectors stored (state + internal state)
    reflections: dict[str, int]  # kind -> count after the drain
    kinds: list[KindTime]
    worker_cpu_pct: float  # % of one core, all worker processes
    cpu: CpuUse
    timeline: list[QueueSample] = field(default_factory=list)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.drain_s

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.drain_s

    @property
    def trajectories_per_s(self) -> float:
        return self.trajectories / self.drain_s


def _counts(url: str) -> tuple[int, int, int, dict[str, int]]:
    """(trajectories, steps, exemplar vectors, reflections by kind) in the database."""
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            trajectories, steps = conn.execute(
                select(func.count(), func.coalesce(func.sum(TrajectoryRow.step_count), 0))
            ).one()
            vectors = conn.execute(select(func.count()).where(Embedding.kind == "exemplar")).scalar_one()
            kinds = dict(conn.execute(select(Reflection.kind, func.count()).group_by(Reflection.kind)).all())
    finally:
        engine.dispose()
    return int(trajectories), int(steps), int(vectors), {str(k): int(n) for k, n in kinds.items()}


def drain(url: str, backend: str, setup: Setup, work: Path, *, quiet_wait_s: float, timeout_s: float) -> DrainResult:
    """Start the workers on a database whose queue is full; return when it is empty."""
    pg_database = make_url(url).database if backend == "postgres" else None
    cores = os.cpu_count() or 1
    wait_for_quiet(cores, max_wait_s=quiet_wait_s)
    started = time.time()
    before = CpuSample.take(None, pg_database)
    with (
        QueueWatch(url, interval=0.5) as watch,
        workers(url, work, processes=setup.processes, concurrency=setup.concurrency) as procs,
    ):
        cpu0 = sum(tree_cpu_seconds(p.pid) for p in procs)
        while time.time() - started < timeout_s:
            time.sleep(0.5)
            latest = watch.latest()
            if latest.t > 1.0 and latest.waiting == 0:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a worker exited with {[p.poll() for p in procs]}; logs in {work}")
        else:
            progress(f"  drain not finished after {timeout_s:.0f} s: stopping it")
        worker_cpu = sum(tree_cpu_seconds(p.pid) for p in procs) - cpu0
        after = CpuSample.take(None, pg_database)
        jobs = finished_jobs(watch.engine)
        failed = watch.latest().failed
    trajectories, steps, vectors, reflections = _counts(url)
    first, last = min(j.finished for j in jobs), max(j.finished for j in jobs)
    return DrainResult(
        backend=backend,
        setup=setup,
        jobs=len(jobs),
        failed=failed,
        trajectories=trajectories,
        steps=steps,
        startup_s=first - started,
        drain_s=last - started,
        exemplars=reflections.get("exemplar", 0),
        vectors=vectors,
        reflections=reflections,
        kinds=attribute(jobs, started),
        worker_cpu_pct=100 * worker_cpu / max(after.at - before.at, 1e-9),
        cpu=CpuUse.between(before, after, cores),
        timeline=watch.samples,
    )


def run_drains(
    dbs: Databases, backend: str, source: str, setups: list[Setup], work: Path, *, quiet_wait_s: float, timeout_s: float
) -> tuple[list[DrainResult], str]:
    """Each setup on its own copy of the backlog; returns the results and the database
    the last setup drained (the steady state the lag measurement continues from)."""
    results, url = [], source
    for setup in setups:
        url = dbs.copy(source, f"drain-{setup.processes}x{setup.concurrency}")
        progress(f"  {backend}, {setup.label}: draining")
        result = drain(url, backend, setup, work, quiet_wait_s=quiet_wait_s, timeout_s=timeout_s)
        progress(
            f"  {backend}, {setup.label}: {result.jobs} jobs in {result.drain_s:.1f} s = "
            f"{result.jobs_per_s:.1f} jobs/s, {result.steps_per_s:.0f} steps/s, {result.failed} failed"
        )
        results.append(result)
    return results, url
