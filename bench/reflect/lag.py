"""Part (b) of bench.reflect: queue lag under a steady ingest load.

On the database a drain left (the full backlog reflected: a steady state, not an
empty namespace), an API server (worker off) and worker processes run while this
process posts closed rollout groups at K trajectories/s for a fixed window, for a
ladder of rates. Per rate:

- close-to-searchable lag of every trajectory posted in the window, from the jobs
  table: its `trajectory.closed` job's enqueue (same transaction as the close) to
  its completion (the exemplars are then searchable: the next retrieve's index
  sync sees them);
- the same seen by a client: every `probe_interval` s a probe closes a one-step
  trajectory and retrieves with its consistency token; write acknowledged -> answer;
- the oldest waiting job's age per kind, sampled every second.

A rate is sustainable when, at the end of its window, no `trajectory.closed` job has
waited longer than the SLO and the window's p95 lag is within it. Between rates the
queue drains (bounded) so each rate starts empty.
"""

from __future__ import annotations

import dataclasses
import math
import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from bench.common.agent_states import unique_state
from bench.common.api import NAMESPACE, headers
from bench.common.latency import Latency
from bench.common.output import progress
from bench.common.processes import server, workers
from bench.reflect.drain import Setup, post_batch
from bench.reflect.queue import CLOSED, QueueSample, QueueWatch, finished_jobs, last_job_id
from bench.reflect.workload import Shape, groups


@dataclass(frozen=True)
class LagPlan:
    shape: Shape  # the tasks the load's rollouts are drawn from
    rates: tuple[float, ...]  # trajectories/s, lowest first
    window_s: float
    slo_s: float  # longest acceptable close-to-searchable lag
    probe_every_s: float


@dataclass
class LagLevel:
    rate: float  # trajectories/s asked for
    posted: int
    achieved_rate: float
    lag: Latency  # trajectory.closed: enqueued -> done, every trajectory of the window
    not_done: int  # of them, still not done when the queue was given up on
    probe: Latency  # a client's write acknowledged -> retrieve with the token answered
    probe_errors: int
    oldest_end_s: dict[str, float]  # kind -> oldest waiting job's age at the window's end
    sustainable: bool
    timeline: list[QueueSample] = field(default_factory=list)


@dataclass
class LagResult:
    backend: str
    setup: Setup
    window_s: float
    slo_s: float
    levels: list[LagLevel]

    @property
    def max_sustainable(self) -> float | None:
        return max((lv.rate for lv in self.levels if lv.sustainable), default=None)


class _Probe(threading.Thread):
    """Every `interval` s: close a one-step trajectory with a unique state, then
    retrieve with its consistency token (the server waits for the indexing job)."""

    def __init__(self, url: str, key: str, interval: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, headers=headers(key), timeout=120)
        self.interval, self.rng = interval, random.Random(seed)
        self.stop = threading.Event()
        self.seconds: list[float] = []
        self.errors = 0
        self.job_ids: set[int] = set()  # the probes' own jobs, kept out of the load's lag

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            state = unique_state(self.rng, f"probe-{self.rng.random()}")
            traj = {
                "task": "probe",
                "environment": "probe",
                "steps": [{"state": {"observation": state.observation}, "action": state.action}],
                "outcome": {"success": True},
            }
            try:
                token = post_batch(self.client, [traj])
                acked = time.perf_counter()
                _, first, last = token.split(".")  # "c1.<first job id>.<last job id>"
                self.job_ids.update(range(int(first), int(last) + 1))
                body = {"state": {"observation": state.observation}, "k": 1}
                body |= {"consistency_token": token, "wait_timeout_ms": 60_000}
                r = self.client.post(f"/v1/namespaces/{NAMESPACE}/retrieve", content=orjson.dumps(body))
                if r.status_code == 200:
                    self.seconds.append(time.perf_counter() - acked)
                else:
                    self.errors += 1
            except httpx.HTTPError:
                self.errors += 1
        self.client.close()


def _level(url: str, key: str, client: httpx.Client, plan: LagPlan, rate: float) -> LagLevel:
    window_s, slo_s = plan.window_s, plan.slo_s
    # Rollouts of the backlog's tasks, as many as the window can post at this rate: the
    # loop below posts while posted <= rate x elapsed, so at most one group past
    # rate x window. (The backlog's size, plan.shape.trajectories, has nothing to do
    # with it; a load cut to it ran dry mid-window at quick sizes.)
    enough = math.ceil(rate * window_s) + plan.shape.group_max
    shape = dataclasses.replace(plan.shape, trajectories=enough)
    load = groups(shape, prefix=f"lag{rate:g}-", rollout_seed=int(rate * 1000) + 1)
    probe = _Probe(str(client.base_url), key, plan.probe_every_s, seed=3)
    posted = 0
    with QueueWatch(url, interval=1.0) as watch:
        first_id = last_job_id(watch.engine)
        probe.start()
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < window_s:
            if posted <= rate * elapsed:
                group = next(load)
                post_batch(client, group)
                posted += len(group)
            else:
                time.sleep(min(0.05, (posted + 1) / rate - elapsed))
        achieved = posted / (time.perf_counter() - started)
        end = watch.latest()
        probe.stop.set()
        probe.join()
        _wait_empty(watch, timeout_s=max(120.0, 2 * window_s))
        jobs = [j for j in finished_jobs(watch.engine, first_id) if j.kind == CLOSED and j.id not in probe.job_ids]
    lags = [j.finished - j.created for j in jobs]
    stats = Latency.of(lags)
    oldest = end.oldest_s.get(CLOSED, 0.0)
    return LagLevel(
        rate=rate,
        posted=posted,
        achieved_rate=achieved,
        lag=stats,
        not_done=max(0, posted - len(jobs)),
        probe=Latency.of(probe.seconds),
        probe_errors=probe.errors,
        oldest_end_s=end.oldest_s,
        sustainable=oldest <= slo_s and stats.p95_ms <= slo_s * 1000 and achieved >= 0.9 * rate,
        timeline=watch.samples,
    )


def _wait_empty(watch: QueueWatch, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and watch.latest().waiting:
        time.sleep(1.0)


def run_lag(url: str, backend: str, setup: Setup, plan: LagPlan, work: Path) -> LagResult:
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    levels = []
    # The default embedder: the probes' retrieves embed their query like an agent's.
    with (
        server(url, key, work, env={"REFLEXA_WORKER__IN_PROCESS": "false"}) as srv,
        workers(url, work, processes=setup.processes, concurrency=setup.concurrency),
        httpx.Client(base_url=srv.url, headers=headers(key), timeout=300) as client,
    ):
        # The first retrieve builds the namespace's index from SQL: not part of any level.
        warm = orjson.dumps({"state": {"observation": "warm-up"}, "k": 1})
        client.post(f"/v1/namespaces/{NAMESPACE}/retrieve", content=warm).raise_for_status()
        for rate in plan.rates:
            level = _level(url, key, client, plan, rate)
            progress(
                f"  {backend}, {rate:g} trajectories/s: lag p50 {level.lag.p50_ms / 1000:.1f} s, "
                f"p95 {level.lag.p95_ms / 1000:.1f} s, probe p50 {level.probe.p50_ms:.0f} ms, "
                f"{'sustainable' if level.sustainable else 'not sustainable'}"
            )
            levels.append(level)
            if not level.sustainable:
                break  # higher rates only queue more
    return LagResult(backend, setup, plan.window_s, plan.slo_s, levels)
