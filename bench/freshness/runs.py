"""What bench.freshness measures on one `reflexa serve` process (defaults: SQLite
under its data directory, the in-process worker, the ONNX encoder): how fast closed
episodes become searchable against the encoder's own rate on the same texts, the
write-ack -> searchable lag under paced ingest with a busy core, and an awaited job
against another namespace's backlog.

Episodes are closed 50-step trajectories of unique states (bench.common.agent_states): every
observation and every internal state carries the episode's tag, so every step is a new
exemplar with two texts the worker has to encode (no vector is reused by text hash;
repeated agent states would only make the server's side cheaper).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from bench import REPO
from bench.common.agent_states import unique_state
from bench.common.api import headers, retrieve_body, wait_token
from bench.common.cpu import CpuSample, CpuUse, tree_cpu_seconds
from bench.common.latency import Latency
from bench.common.processes import OFFLINE_ENV, free_port, proc_memory_mb, share_models, stop_group, wait_healthy

K = 10
TRAJECTORY_CLOSED = "trajectory.closed"
TASK = "benchmark episode"


# -- the server ------------------------------------------------------------------------------------------


@dataclass
class Serve:
    url: str
    process: subprocess.Popen[bytes]
    key: str
    db_url: str
    data_dir: Path
    engine: Engine  # the bench's own read-only look at the jobs table

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.contextmanager
def reflexa_serve(work: Path) -> Iterator[Serve]:
    """`reflexa serve` with its defaults (SQLite at <data_dir>/reflexa.db, migrated on
    start; in-process worker; ONNX encoder), in a process group of its own; the
    shared ONNX export is linked into its data directory. `REFLEXA_*` settings of
    this environment are inherited (and reported), except a database URL."""
    data_dir = share_models(work / "serve-data")
    port = free_port()
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if k != "REFLEXA_DATABASE_URL"}
    env |= {**OFFLINE_ENV, "REFLEXA_DATA_DIR": str(data_dir), "REFLEXA_ADMIN_KEY": key}
    reflexa = Path(sys.executable).with_name("reflexa")
    cmd = [str(reflexa) if reflexa.exists() else "reflexa", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--log-level", "warning"]
    log = work / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    db_url = f"sqlite:///{(data_dir / 'reflexa.db').resolve()}"
    engine = create_engine(db_url)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, log, timeout=300)
        yield Serve(url, proc, key, db_url, data_dir, engine)
    finally:
        stop_group(proc, grace_s=60)
        engine.dispose()


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` processes that each spin one core (a neighbour's CPU-bound job), stopped on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            stop_group(p, grace_s=2)


# -- the workload --------------------------------------------------------------------------------------


def episode(tag: str, rng: random.Random, steps: int) -> dict[str, Any]:
    """A closed episode of `steps` unique states (observation and internal state tagged)."""
    states = [unique_state(rng, f"{tag}.{i}") for i in range(steps)]
    return {
        "id": tag,
        "task": TASK,
        "environment": states[0].environment,
        "steps": [
            {
                "state": {"observation": s.observation},
                "internal_state": f"{s.thought} ({tag}.{i})",
                "action": s.action,
                "result": s.result,
            }
            for i, s in enumerate(states)
        ],
        "outcome": {"success": True},
    }


def episode_texts(ep: dict[str, Any]) -> list[str]:
    """The texts the exemplar reflector encodes for this episode (state + internal
    state per step), made by the server's own functions with default settings."""
    from domain.settings import NamespaceSettings
    from domain.state_text import internal_text, state_text

    cfg = NamespaceSettings().state_text
    out = []
    for step in ep["steps"]:
        out.append(state_text(cfg, observation=step["state"]["observation"], data=None, task=ep["task"]))
        internal = internal_text(step["internal_state"], cfg.max_chars)
        if internal:
            out.append(internal)
    return out


def probe_text(ep: dict[str, Any]) -> str:
    """The last step's observation: in the answer once the whole episode is indexed."""
    return str(ep["steps"][-1]["state"]["observation"])


def found(items: list[dict[str, Any]], text: str) -> bool:
    return any(it.get("content", {}).get("observation") == text for it in items)


# -- the jobs table --------------------------------------------------------------------------------------


@dataclass
class JobTimes:
    trajectory_id: str
    namespace: str
    created: float  # epoch seconds
    finished: float | None
    priority: int
    holder: str | None  # the worker slot that ran it (locked_by stays set once done)


def job_times(srv: Serve, prefix: str) -> list[JobTimes]:
    """`trajectory.closed` jobs of the trajectories whose id starts with `prefix`."""
    from store.models import Job, Trajectory

    with Session(srv.engine) as s:
        ids = dict(s.execute(select(Trajectory.pk, Trajectory.id).where(Trajectory.id.startswith(prefix))).all())
        jobs = s.scalars(select(Job).where(Job.kind == TRAJECTORY_CLOSED)).all()
        out = []
        for j in jobs:
            tid = ids.get(int(j.payload.get("trajectory_pk", -1)))
            if tid is not None:
                finished = j.finished_at.timestamp() if j.finished_at else None
                created = j.created_at.timestamp()
                out.append(JobTimes(tid, j.namespace, created, finished, j.priority, j.locked_by))
    return out


def pending_jobs(srv: Serve) -> int:
    from store.models import Job

    with Session(srv.engine) as s:
        return int(s.scalar(select(func.count()).select_from(Job).where(Job.status.in_(["queued", "running"]))) or 0)


def wait_drained(srv: Serve, timeout_s: float) -> float:
    """Seconds until no job is queued or running (bounded)."""
    t0 = time.perf_counter()
    while pending_jobs(srv) and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.2)
    return time.perf_counter() - t0


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                f = (task / "stat").read_text().rsplit(")", 1)[1].split()
                out[int(task.name)] = (int(f[11]) + int(f[12])) / tick
    return out


def busiest_threads(before: dict[int, float], after: dict[int, float], n: int = 3) -> list[float]:
    return sorted((cpu - before.get(tid, 0.0) for tid, cpu in after.items()), reverse=True)[:n]


# -- 1. searchable items/s against the encoder -------------------------------------------------------------


@dataclass
class SearchableRound:
    episodes: int
    exemplars: int
    texts: int
    server_s: float  # batch POST -> its consistency token answered
    jobs_span_s: float  # first job created -> last job finished (jobs table)
    floor_parallel_s: float  # the same texts, worker-shaped batches, `callers` at once
    floor_serial_s: float  # the same batches one after another
    server_cpu_pct: float
    other_cpu_pct: float
    server_cpu_s: float = float("nan")
    floor_parallel_cpu_s: float = float("nan")  # this process's CPU time during the floor
    floor_serial_cpu_s: float = float("nan")
    busiest_threads_s: tuple[float, ...] = ()  # the server's busiest threads during its part, CPU s


def encode_floor(enc: Any, per_episode: list[list[str]], batch_jobs: int, callers: int) -> tuple[float, float]:
    """The encoder alone on the worker's shape of work: one `encode` per batch of
    `batch_jobs` episodes' texts, `callers` batches at once (the worker's slots).
    Returns (wall seconds, this process's CPU seconds)."""
    groups = [sum(per_episode[i : i + batch_jobs], []) for i in range(0, len(per_episode), batch_jobs)]
    c0, t0 = time.process_time(), time.perf_counter()
    if callers == 1:
        for g in groups:
            enc.encode(g)
    else:
        with ThreadPoolExecutor(max_workers=callers) as pool:
            list(pool.map(enc.encode, groups))
    return time.perf_counter() - t0, time.process_time() - c0


def searchable_round(
    srv: Serve,
    client: httpx.Client,
    ns: str,
    eps: list[dict[str, Any]],
    enc: Any,
    batch_jobs: int,
    callers: int,
    r: int,
) -> SearchableRound:
    per_episode = [episode_texts(ep) for ep in eps]
    body = orjson.dumps({"trajectories": eps})
    cores = os.cpu_count() or 1

    def server() -> tuple[float, CpuUse, list[float]]:
        threads0 = thread_cpu_seconds(srv.pid)
        before = CpuSample.take(srv.pid, None)
        t0 = time.perf_counter()
        resp = client.post(f"/v1/namespaces/{ns}/trajectories/batch", content=body)
        resp.raise_for_status()
        wait_token(client, ns, resp.json()["consistency_token"], probe_text(eps[-1]), K, 1800).raise_for_status()
        elapsed = time.perf_counter() - t0
        use = CpuUse.between(before, CpuSample.take(srv.pid, None), cores)
        return elapsed, use, busiest_threads(threads0, thread_cpu_seconds(srv.pid))

    # The order rotates by round: server first, then each floor first.
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("server", server),
        ("parallel", lambda: encode_floor(enc, per_episode, batch_jobs, callers)),
        ("serial", lambda: encode_floor(enc, per_episode, batch_jobs, 1)),
    ]
    parts = parts[r % 3 :] + parts[: r % 3]
    got = {name: fn() for name, fn in parts}
    server_s, use, busiest = got["server"]
    jobs = job_times(srv, eps[0]["id"].rsplit("-", 1)[0] + "-")
    span = max(j.finished or 0 for j in jobs) - min(j.created for j in jobs) if jobs else float("nan")
    return SearchableRound(
        episodes=len(eps),
        exemplars=sum(len(ep["steps"]) for ep in eps),
        texts=sum(len(t) for t in per_episode),
        server_s=server_s,
        jobs_span_s=span,
        floor_parallel_s=got["parallel"][0],
        floor_serial_s=got["serial"][0],
        server_cpu_pct=use.server_pct,
        other_cpu_pct=use.other_pct,
        server_cpu_s=use.server_cpu_s,
        floor_parallel_cpu_s=got["parallel"][1],
        floor_serial_cpu_s=got["serial"][1],
        busiest_threads_s=tuple(busiest),
    )


# -- 2. lag under paced ingest ----------------------------------------------------------------------------


@dataclass
class LagLevel:
    asked_eps: float  # episodes/s asked
    achieved_eps: float
    episodes: int
    window_s: float
    token: Latency  # write acknowledged -> read-your-writes retrieve answered (with the episode in it)
    token_waited: Latency  # of which the server's `waited_ms`
    poll: Latency  # write acknowledged -> first polled answer with the episode in it
    jobs: Latency  # job created -> finished, every episode of the level (jobs table)
    token_missing: int  # answers without the episode, or waits that timed out
    poll_timeouts: int
    errors: int
    pending_at_end: int  # jobs queued or running when the window closed
    drain_s: float  # window closed -> no job queued or running
    server_cpu_pct: float
    busy_cpu_pct: float
    other_cpu_pct: float  # the rest of the machine, busy loop excluded
    encode_one: Latency | None = None  # floor: one episode's texts through the encoder here, same busy core


class Agents:
    """Per thread, one `reflexa.Client` (its read-your-writes session remembers only
    that thread's writes) and one raw httpx client for polling."""

    def __init__(self, srv: Serve, ns: str) -> None:
        self.srv, self.ns = srv, ns
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def clients(self) -> tuple[Any, httpx.Client]:
        if not hasattr(self._local, "sdk"):
            from reflexa import Client

            self._local.sdk = Client(self.srv.url, api_key=self.srv.key, namespace=self.ns, timeout=120)
            self._local.http = httpx.Client(base_url=self.srv.url, headers=headers(self.srv.key), timeout=120)
            with self._lock:
                self._all += [self._local.sdk, self._local.http]
        return self._local.sdk, self._local.http

    def close(self) -> None:
        for c in self._all:
            c.close()


@dataclass
class _Probe:
    mode: str
    lag_s: float | None = None
    waited_s: float | None = None
    ok: bool = False
    error: bool = False


def token_probe(agents: Agents, ep: dict[str, Any], deadline_s: float) -> _Probe:
    """The agent's read-your-writes: write with the client, then retrieve with its
    default `consistency="session"` (the client sends the write's token)."""
    from reflexa import ConsistencyTimeout

    sdk, _ = agents.clients()
    out = _Probe("token")
    try:
        sdk.create_trajectory(
            agents.ns, id=ep["id"], task=ep["task"], environment=ep["environment"], steps=ep["steps"],
            outcome=ep["outcome"],
        )  # fmt: skip
    except Exception:  # noqa: BLE001 - counted, the run goes on
        out.error = True
        return out
    acked = time.perf_counter()
    text = probe_text(ep)
    while True:
        try:
            res = sdk.retrieve(agents.ns, text, k=K, wait_timeout_ms=30_000)
        except ConsistencyTimeout:
            if time.perf_counter() - acked > deadline_s:
                return out
            continue
        except Exception:  # noqa: BLE001
            out.error = True
            return out
        out.lag_s = time.perf_counter() - acked
        out.waited_s = res.waited_ms / 1000
        out.ok = any(it.content.get("observation") == text for it in res.items)
        return out


def poll_probe(agents: Agents, ep: dict[str, Any], interval_s: float, deadline_s: float) -> _Probe:
    """Write, then retrieve without a token every `interval_s` until the episode is in the answer."""
    _, http = agents.clients()
    out = _Probe("poll")
    r = http.post(f"/v1/namespaces/{agents.ns}/trajectories", content=orjson.dumps(ep))
    if r.status_code != 201:
        out.error = True
        return out
    acked = time.perf_counter()
    text = probe_text(ep)
    body = retrieve_body(text, K)
    while time.perf_counter() - acked < deadline_s:
        resp = http.post(f"/v1/namespaces/{agents.ns}/retrieve", content=body)
        if resp.status_code == 200 and found(resp.json()["items"], text):
            out.lag_s, out.ok = time.perf_counter() - acked, True
            return out
        time.sleep(interval_s)
    return out


def lag_level(
    srv: Serve,
    ns: str,
    rate: float,
    window_s: float,
    steps: int,
    interval_s: float,
    tag: str,
    busy: list[subprocess.Popen[bytes]],
    seed: int,
    enc: Any = None,
    floor_samples: int = 3,
) -> LagLevel:
    """Closed episodes posted at `rate`/s for `window_s`, each by an agent thread that
    then checks it, alternately with the consistency token and by polling. Then, the
    server idle, the floor of one episode's lag: its texts through the encoder in this
    process (one call, as a batch of one job would make), under the same busy loop."""
    rng = random.Random(seed)
    agents = Agents(srv, ns)
    futures = []
    cores = os.cpu_count() or 1
    busy0 = sum(tree_cpu_seconds(p.pid) for p in busy)
    before = CpuSample.take(srv.pid, None)
    with ThreadPoolExecutor(max_workers=64) as pool:
        start = time.perf_counter()
        nxt, i = start, 0
        while nxt - start < window_s:
            ep = episode(f"{tag}-{i}", rng, steps)
            time.sleep(max(0.0, nxt - time.perf_counter()))
            if i % 2 == 0:
                futures.append(pool.submit(token_probe, agents, ep, 600))
            else:
                futures.append(pool.submit(poll_probe, agents, ep, interval_s, 600))
            i += 1
            nxt += 1 / rate
        time.sleep(max(0.0, start + window_s - time.perf_counter()))  # the window is whole periods
        window = time.perf_counter() - start
        after = CpuSample.take(srv.pid, None)
        busy1 = sum(tree_cpu_seconds(p.pid) for p in busy)
        pending = pending_jobs(srv)
        closed = time.perf_counter()
        probes = [f.result() for f in futures]
    drain = wait_drained(srv, 600) + (time.perf_counter() - closed)
    agents.close()
    encode_one = None
    if enc is not None:
        samples = []
        for k in range(floor_samples):
            texts = episode_texts(episode(f"floor-{tag}-{k}", rng, steps))
            t0 = time.perf_counter()
            enc.encode(texts)
            samples.append(time.perf_counter() - t0)
        encode_one = Latency.of(samples)
    use = CpuUse.between(before, after, cores)
    busy_pct = 100 * (busy1 - busy0) / max(after.at - before.at, 1e-9)
    jobs = [j for j in job_times(srv, tag + "-") if j.finished is not None]
    tok = [p for p in probes if p.mode == "token"]
    pol = [p for p in probes if p.mode == "poll"]
    return LagLevel(
        asked_eps=rate,
        achieved_eps=i / window,
        episodes=i,
        window_s=window,
        token=Latency.of([p.lag_s for p in tok if p.ok and p.lag_s is not None]),
        token_waited=Latency.of([p.waited_s for p in tok if p.ok and p.waited_s is not None]),
        poll=Latency.of([p.lag_s for p in pol if p.ok and p.lag_s is not None]),
        jobs=Latency.of([j.finished - j.created for j in jobs if j.finished is not None]),
        token_missing=sum(1 for p in tok if not p.ok and not p.error),
        poll_timeouts=sum(1 for p in pol if not p.ok and not p.error),
        errors=sum(p.error for p in probes),
        pending_at_end=pending,
        drain_s=drain,
        server_cpu_pct=use.server_pct,
        busy_cpu_pct=busy_pct,
        other_cpu_pct=max(0.0, use.other_pct - busy_pct),
        encode_one=encode_one,
    )


# -- 3. an awaited job against another namespace's backlog ------------------------------------------------------


@dataclass
class BacklogRun:
    backlog: int  # episodes queued in the other namespace
    backlog_drain_s: float  # its first job created -> its last job finished (jobs table)
    token_lag_s: float | None  # the agent's read-your-writes on its own namespace, write acked -> answer
    token_ok: bool
    poll_lag_s: float | None  # the same kind of episode, polled without a token
    poll_ok: bool
    token_job_s: float | None  # the awaited job: created -> finished
    poll_job_s: float | None
    backlog_done_before_token: int  # backlog jobs finished before the awaited job finished
    backlog_done_before_poll: int
    token_priority: int | None  # the awaited job's priority as stored (AWAITED = 5)
    server_cpu_pct: float
    busy_cpu_pct: float
    other_cpu_pct: float
    token_batch: int = 0  # jobs the awaited job's slot ran with it in one batch (itself included)
    token_batch_other_ns: int = 0  # … of them from the other namespace's backlog
    token_claimed_after_s: float | None = None  # awaited job created -> its slot's previous batch done


def backlog_run(
    srv: Serve,
    client: httpx.Client,
    own_ns: str,
    other_ns: str,
    cfg_backlog: int,
    steps: int,
    interval_s: float,
    busy: list[subprocess.Popen[bytes]],
    seed: int,
) -> BacklogRun:
    """Queue `cfg_backlog` episodes in `other_ns` in one batch; right after, an agent
    closes an episode in `own_ns` and polls for it, and another closes one and
    retrieves with its token (which moves its job to Priority.AWAITED)."""
    rng = random.Random(seed)
    backlog = [episode(f"backlog-{i}", rng, steps) for i in range(cfg_backlog)]
    poll_ep, token_ep = episode("awaitpoll-0", rng, steps), episode("awaittoken-0", rng, steps)
    cores = os.cpu_count() or 1
    busy0 = sum(tree_cpu_seconds(p.pid) for p in busy)
    before = CpuSample.take(srv.pid, None)
    body = orjson.dumps({"trajectories": backlog})
    client.post(f"/v1/namespaces/{other_ns}/trajectories/batch", content=body).raise_for_status()
    agents = Agents(srv, own_ns)
    with ThreadPoolExecutor(max_workers=2) as pool:
        poll = pool.submit(poll_probe, agents, poll_ep, interval_s, 1800)
        time.sleep(0.05)  # the polled episode is written first: without the token, the awaited one would be last
        token = pool.submit(token_probe, agents, token_ep, 1800)
        tp, pp = token.result(), poll.result()
    wait_drained(srv, 1800)
    after = CpuSample.take(srv.pid, None)
    busy1 = sum(tree_cpu_seconds(p.pid) for p in busy)
    agents.close()
    use = CpuUse.between(before, after, cores)
    busy_pct = 100 * (busy1 - busy0) / max(after.at - before.at, 1e-9)
    bl = job_times(srv, "backlog-")
    tj = next(iter(job_times(srv, "awaittoken-")), None)
    pj = next(iter(job_times(srv, "awaitpoll-")), None)

    batch, prev_done = _batch_of(tj, bl + [j for j in (tj, pj) if j is not None])

    def done_before(j: JobTimes | None) -> int:
        if j is None or j.finished is None:
            return 0
        return sum(1 for b in bl if b.finished is not None and b.finished < j.finished)

    return BacklogRun(
        backlog=cfg_backlog,
        backlog_drain_s=max(b.finished or 0 for b in bl) - min(b.created for b in bl) if bl else float("nan"),
        token_lag_s=tp.lag_s,
        token_ok=tp.ok,
        poll_lag_s=pp.lag_s,
        poll_ok=pp.ok,
        token_job_s=(tj.finished - tj.created) if tj and tj.finished else None,
        poll_job_s=(pj.finished - pj.created) if pj and pj.finished else None,
        backlog_done_before_token=done_before(tj),
        backlog_done_before_poll=done_before(pj),
        token_priority=tj.priority if tj else None,
        token_batch=len(batch),
        token_batch_other_ns=sum(1 for j in batch if j.namespace == other_ns),
        token_claimed_after_s=(prev_done - tj.created) if tj and prev_done is not None else None,
        server_cpu_pct=use.server_pct,
        busy_cpu_pct=busy_pct,
        other_cpu_pct=max(0.0, use.other_pct - busy_pct),
    )


def _batch_of(job: JobTimes | None, jobs: list[JobTimes], gap_s: float = 1.5) -> tuple[list[JobTimes], float | None]:
    """The jobs that ran in one batch with `job`: the same slot, finishing one after
    another (each batch's writes land within a second; batches are seconds of
    encoding apart), and when that slot's previous batch finished."""
    if job is None or job.finished is None or job.holder is None:
        return [], None
    mine = sorted((j for j in jobs if j.holder == job.holder and j.finished is not None), key=lambda j: j.finished or 0)
    i = next(k for k, j in enumerate(mine) if j is job)
    lo = hi = i
    while lo > 0 and (mine[lo].finished or 0) - (mine[lo - 1].finished or 0) < gap_s:
        lo -= 1
    while hi + 1 < len(mine) and (mine[hi + 1].finished or 0) - (mine[hi].finished or 0) < gap_s:
        hi += 1
    prev = mine[lo - 1].finished if lo > 0 else None
    return mine[lo : hi + 1], prev


def server_rss_mb(srv: Serve) -> float:
    return proc_memory_mb(srv.pid)[0]
