"""Ingest benchmark: steps per second the server accepts over HTTP, against the raw
floor of inserting the same rows with SQLAlchemy core.

    python -m bench.ingest [--quick | --smoke] [--out docs/benchmarks/ingest.md] [--out results.json]
    python -m bench.ingest --profile DIR [--quick]   # same load, py-spy on the server

For each backend a real uvicorn server runs on a fresh database (SQLite: one process,
its sane deployment; PostgreSQL: one process and `--workers 2`, since PostgreSQL takes
parallel writers). For 1, 4 and 16 concurrent clients, each client thread owns its
trajectories and sends 50-step batches with explicit indexes: the first batch creates
the trajectory, the next nine append to it, then the outcome closes it and the client
starts a new one. Only 2xx step-carrying requests that complete inside the measured
window (after the warm-up) count toward steps/s, req/s and latency; every non-2xx
answer or transport error of the level is counted as an error.

The raw floor runs in the same invocation: the same step rows (same sizes) inserted by
`insert(Step)` executemany in 50-row transactions, one process, a fresh database of
the same engine with the server's engine settings. HTTP/floor says how much of the
database's speed the service keeps.

The load generator shares the machine with the server (and PostgreSQL), so request
bodies are encoded once up front, the client's own CPU use is reported next to the
server's, and each level waits (bounded) for the machine to be quiet before it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import Engine, insert
from sqlalchemy.engine import make_url

from bench.common import pyspy
from bench.common.agent_states import environment_of, make_trajectory_steps, task_of
from bench.common.api import NAMESPACE
from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.cpu import BUSY_OTHER_PCT, CpuSample, CpuUse, wait_for_quiet
from bench.common.databases import Databases, databases
from bench.common.latency import percentile
from bench.common.machine import MachineFacts
from bench.common.output import write_outputs
from bench.common.processes import API_ONLY_ENV, server
from bench.common.report import RunFacts, opening
from migrations import upgrade
from store.database import create_db_engine
from store.models import Namespace, Step, Trajectory, utcnow

SECTION = "ingest"
TARGET_STEPS_PER_S = 5_000
TARGET_P99_MS = 50.0


@dataclass(frozen=True)
class Config:
    """How long and how hard to push. FULL stays under ~5 minutes end to end, QUICK under ~1,
    SMOKE (SQLite only unless --backend says otherwise) takes seconds: it only shows that
    every part runs (tests/bench)."""

    warmup_s: float
    duration_s: float
    floor_s: float
    concurrencies: tuple[int, ...] = (1, 4, 16)
    batch_steps: int = 50
    batches_per_trajectory: int = 10
    variants: int = 16  # distinct trajectories' worth of step content, reused round-robin
    request_timeout_s: float = 60.0
    quiet_wait_s: float = 15.0  # longest wait, per level, for other work on the machine to stop
    busy_retries: int = 1  # a level measured while other work ran is measured again, this often at most


FULL = Config(warmup_s=3.0, duration_s=15.0, floor_s=8.0)
QUICK = Config(warmup_s=0.5, duration_s=2.5, floor_s=1.5, quiet_wait_s=2.0, busy_retries=0)
SMOKE = Config(warmup_s=0.2, duration_s=1.0, floor_s=0.5, variants=4, quiet_wait_s=0.5, busy_retries=0)
SIZES = Sizes(
    FULL,
    QUICK,
    SMOKE,
    quick_help="short windows: a smoke run of about a minute",
    smoke_help="1 s windows, SQLite only: seconds, for tests/bench",
)


@dataclass(frozen=True)
class Deployment:
    backend: str  # sqlite | postgres
    workers: int

    @property
    def label(self) -> str:
        engine = "SQLite" if self.backend == "sqlite" else "PostgreSQL"
        procs = "1 uvicorn process" if self.workers == 1 else f"uvicorn --workers {self.workers}"
        return f"{engine}, {procs}"


DEPLOYMENTS = (Deployment("sqlite", 1), Deployment("postgres", 1), Deployment("postgres", 2))


# -- workload ---------------------------------------------------------------------------


class Workload:
    """Request bodies and floor rows, built once so that timing sees only the work.

    A trajectory of variant v sends the same 500 steps whatever its id; the bodies are
    spliced from pre-encoded JSON so the client spends almost no CPU per request.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        size, batches = cfg.batch_steps, cfg.batches_per_trajectory
        self.steps = [make_trajectory_steps(seed=v, n_steps=size * batches) for v in range(cfg.variants)]
        self._chunks = [
            [orjson.dumps(steps[b * size : (b + 1) * size]) for b in range(batches)] for steps in self.steps
        ]
        self._appends = [[b'{"steps":' + c + b"}" for c in chunks] for chunks in self._chunks]
        self.step_bytes = statistics.mean(len(orjson.dumps(s)) for steps in self.steps for s in steps)

    def create_body(self, variant: int, trajectory_id: str) -> bytes:
        head = {"id": trajectory_id, "task": task_of(variant), "environment": environment_of(variant)}
        return orjson.dumps(head)[:-1] + b',"steps":' + self._chunks[variant][0] + b"}"

    def append_body(self, variant: int, batch: int) -> bytes:
        return self._appends[variant][batch]

    def floor_rows(self, variant: int, batch: int) -> list[dict[str, Any]]:
        """The rows the server would insert for this batch (trajectory_pk left to fill)."""
        size = self.cfg.batch_steps
        return [_step_row(s) for s in self.steps[variant][batch * size : (batch + 1) * size]]


def _step_row(step: dict[str, Any]) -> dict[str, Any]:
    """A `steps` row as the server builds it (same columns, same value sizes)."""
    body = {k: v for k, v in step.items() if k != "index"}
    return {
        "index": step["index"],
        "observation": step["state"]["observation"],
        "state_data": step["state"]["data"],
        "internal_state": step["internal_state"],
        "action": step["action"],
        "result": step["result"],
        "error": None,
        "reward": step["reward"],
        "done": False,
        "truncated": False,
        "caused_failure": False,
        "metadata_": None,
        "content_hash": hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest(),
    }


# -- HTTP load ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The server under load: where it listens, its admin key, whose CPU to count."""

    url: str
    key: str
    pid: int
    pg_database: str | None


@dataclass
class Sample:
    kind: str  # create | append | outcome
    done_at: float  # perf_counter at completion
    latency_s: float
    steps: int
    ok: bool


@dataclass
class ClientLog:
    samples: list[Sample] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None

    def record(self, kind: str, start: float, steps: int, outcome: httpx.Response | Exception) -> bool:
        end = time.perf_counter()
        ok = isinstance(outcome, httpx.Response) and outcome.is_success
        self.samples.append(Sample(kind, end, end - start, steps if ok else 0, ok))
        if not ok:
            key = f"HTTP {outcome.status_code}" if isinstance(outcome, httpx.Response) else type(outcome).__name__
            self.errors[key] += 1
            if self.first_error is None:
                detail = outcome.text[:300] if isinstance(outcome, httpx.Response) else repr(outcome)
                self.first_error = f"{kind}: {key}: {detail}"
        return ok


def _post(client: httpx.Client, log: ClientLog, kind: str, path: str, body: bytes, steps: int) -> bool:
    start = time.perf_counter()
    try:
        response: httpx.Response | Exception = client.post(path, content=body)
    except httpx.HTTPError as exc:
        response = exc
    return log.record(kind, start, steps, response)


def _client(target: Target, run: str, worker: int, workload: Workload, stop: threading.Event, log: ClientLog) -> None:
    """One client: trajectory after trajectory until told to stop. After an error it
    abandons the trajectory (its next index would be refused) and starts a new one."""
    cfg = workload.cfg
    headers = {"Authorization": f"Bearer {target.key}", "Content-Type": "application/json"}
    prefix = f"/v1/namespaces/{NAMESPACE}/trajectories"
    with httpx.Client(base_url=target.url, headers=headers, timeout=cfg.request_timeout_s) as client:
        n = 0
        while not stop.is_set():
            traj_id = f"{run}-w{worker}-t{n}"
            variant = (worker * 7 + n) % cfg.variants
            n += 1
            ok = _post(client, log, "create", prefix, workload.create_body(variant, traj_id), cfg.batch_steps)
            for batch in range(1, cfg.batches_per_trajectory):
                if not ok or stop.is_set():
                    break
                body = workload.append_body(variant, batch)
                ok = _post(client, log, "append", f"{prefix}/{traj_id}/steps", body, cfg.batch_steps)
            if ok and not stop.is_set():
                _post(client, log, "outcome", f"{prefix}/{traj_id}/outcome", b'{"success":true}', 0)


@dataclass
class LevelResult:
    concurrency: int
    window_s: float
    steps: int
    step_requests: int
    outcome_requests: int
    steps_per_s: float
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    append_p99_ms: float
    create_p99_ms: float
    errors: int
    error_kinds: dict[str, int]
    first_error: str | None
    answered: int  # every request completed in the window: 2xx or not, outcome calls included
    server_cpu_ms_per_request: float  # server CPU time / answered
    cpu: CpuUse


def _summarise(concurrency: int, logs: list[ClientLog], t0: float, t1: float, cpu: CpuUse) -> LevelResult:
    window = [s for log in logs for s in log.samples if t0 <= s.done_at <= t1]
    carrying = [s for s in window if s.kind != "outcome" and s.ok]
    latencies = [s.latency_s * 1000 for s in carrying]
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.errors)
    span = t1 - t0
    steps = sum(s.steps for s in carrying)
    return LevelResult(
        concurrency=concurrency,
        window_s=span,
        steps=steps,
        step_requests=len(carrying),
        outcome_requests=sum(1 for s in window if s.kind == "outcome"),
        steps_per_s=steps / span,
        requests_per_s=len(carrying) / span,
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        max_ms=max(latencies, default=float("nan")),
        append_p99_ms=percentile([s.latency_s * 1000 for s in carrying if s.kind == "append"], 99),
        create_p99_ms=percentile([s.latency_s * 1000 for s in carrying if s.kind == "create"], 99),
        errors=sum(errors.values()),
        error_kinds=dict(errors),
        first_error=next((log.first_error for log in logs if log.first_error), None),
        answered=len(window),
        server_cpu_ms_per_request=1000 * cpu.server_cpu_s / max(len(window), 1),
        cpu=cpu,
    )


WindowHook = Callable[[], contextlib.AbstractContextManager[object]]


def run_level(
    target: Target, concurrency: int, workload: Workload, run: str, during_window: WindowHook | None = None
) -> LevelResult:
    """`concurrency` client threads for warm-up + measured window. CPU is sampled at the
    window's edges so it covers exactly what the throughput covers; `during_window`
    (e.g. a profiler) runs around the measured window only."""
    cfg = workload.cfg
    cores = os.cpu_count() or 1
    wait_for_quiet(cores, max_wait_s=cfg.quiet_wait_s)
    stop = threading.Event()
    logs = [ClientLog() for _ in range(concurrency)]
    threads = [
        threading.Thread(target=_client, args=(target, run, i, workload, stop, logs[i]), daemon=True)
        for i in range(concurrency)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(cfg.warmup_s)
        with during_window() if during_window else contextlib.nullcontext():
            before = CpuSample.take(target.pid, target.pg_database)
            time.sleep(cfg.duration_s)
            after = CpuSample.take(target.pid, target.pg_database)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return _summarise(concurrency, logs, before.at, after.at, CpuUse.between(before, after, cores))


@dataclass
class DeploymentResult:
    backend: str
    workers: int
    label: str
    levels: list[LevelResult]


def run_deployment(
    dep: Deployment, dbs: Databases, workload: Workload, work_dir: Path, profile_dir: Path | None = None
) -> DeploymentResult:
    """One server on a fresh database, every concurrency level against it in turn.
    With `profile_dir`, py-spy samples the server during each measured window."""
    url = dbs.url(dep.backend, f"http-{dep.workers}")
    upgrade(url)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    pg_database = make_url(url).database if dep.backend == "postgres" else None
    levels = []
    with server(url, key, work_dir, workers=dep.workers, env=API_ONLY_ENV) as srv:
        r = httpx.post(
            f"{srv.url}/v1/namespaces", json={"name": NAMESPACE}, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        r.raise_for_status()
        target = Target(srv.url, key, srv.pid, pg_database)
        for c in workload.cfg.concurrencies:
            hook = None
            if profile_dir is not None:
                hook = functools.partial(pyspy.record, srv.pid, profile_dir / _profile_name(dep, c))
            result = run_level(target, c, workload, run=f"c{c}", during_window=hook)
            for attempt in range(1, workload.cfg.busy_retries + 1):
                if result.cpu.other_pct <= BUSY_OTHER_PCT:
                    break
                _progress(
                    f"  {dep.label}, {c:>2} clients: other work used {result.cpu.other_pct:.0f} % "
                    "of a core; measuring again"
                )
                again = run_level(target, c, workload, run=f"c{c}r{attempt}", during_window=hook)
                result = min(result, again, key=lambda lv: lv.cpu.other_pct)
            _progress(
                f"  {dep.label}, {c:>2} clients: {result.steps_per_s:,.0f} steps/s, "
                f"p99 {result.p99_ms:.1f} ms, errors {result.errors}, "
                f"server {result.server_cpu_ms_per_request:.1f} CPU ms/request"
            )
            levels.append(result)
    return DeploymentResult(dep.backend, dep.workers, dep.label, levels)


def _profile_name(dep: Deployment, concurrency: int) -> str:
    return f"{dep.backend}-w{dep.workers}-c{concurrency}.txt"


# -- raw floor ------------------------------------------------------------------------------


@dataclass
class FloorResult:
    backend: str
    rows: int
    seconds: float
    rows_per_s: float
    txn_p50_ms: float
    txn_p99_ms: float


def _insert_trajectories(engine: Engine, first: int, count: int) -> list[int]:
    now = utcnow()
    rows = [
        {
            "namespace": NAMESPACE,
            "id": f"floor-{i}",
            "task": task_of(i),
            "task_hash": "0" * 16,
            "environment": environment_of(i),
            "status": "open",
            "step_count": 0,
            "request_hash": "0" * 64,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(first, first + count)
    ]
    with engine.begin() as conn:
        return [pk for (pk,) in conn.execute(insert(Trajectory).returning(Trajectory.pk), rows)]


def raw_floor(backend: str, dbs: Databases, workload: Workload) -> FloorResult:
    """The same step rows through SQLAlchemy core, 50-row transactions, one process.
    Only the step transactions are timed; trajectory rows are made in untimed chunks."""
    cfg = workload.cfg
    url = dbs.url(backend, "floor")
    upgrade(url)
    wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    engine = create_db_engine(url)  # the server's engine settings (pragmas, pool)
    try:
        with engine.begin() as conn:
            conn.execute(insert(Namespace), [{"name": NAMESPACE, "settings": {}, "created_at": utcnow()}])
        batches = [[workload.floor_rows(v, b) for b in range(cfg.batches_per_trajectory)] for v in range(cfg.variants)]
        pks: list[int] = []
        txn_times: list[float] = []
        deadline = time.perf_counter() + cfg.floor_s
        n = 0
        while time.perf_counter() < deadline:
            if n >= len(pks):
                pks += _insert_trajectories(engine, len(pks), 100)
            pk = pks[n]
            for template in batches[n % cfg.variants]:
                start = time.perf_counter()
                now = utcnow()
                with engine.begin() as conn:
                    conn.execute(insert(Step), [{**r, "trajectory_pk": pk, "created_at": now} for r in template])
                txn_times.append(time.perf_counter() - start)
            n += 1
    finally:
        engine.dispose()
    rows = len(txn_times) * cfg.batch_steps
    seconds = sum(txn_times)
    ms = [t * 1000 for t in txn_times]
    return FloorResult(backend, rows, seconds, rows / seconds, percentile(ms, 50), percentile(ms, 99))


# -- report --------------------------------------------------------------------------------


@dataclass
class Report(RunFacts):
    step_bytes: float
    deployments: list[DeploymentResult]
    floors: dict[str, FloorResult]
    wall_s: float = 0.0


def _table(dep: DeploymentResult, floor: FloorResult | None) -> str:
    head = (
        "| clients | steps/s | req/s | p50 ms | p95 ms | p99 ms | errors | vs floor | server CPU ms/req "
        "| client CPU | server CPU | PG backends CPU | other CPU |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for lv in dep.levels:
        ratio = f"{lv.steps_per_s / floor.rows_per_s:.0%}" if floor else "n/a"
        pg = f"{lv.cpu.postgres_pct:.0f} %" if dep.backend == "postgres" else "–"
        busy = " ⚠" if lv.cpu.other_pct > BUSY_OTHER_PCT else ""
        rows.append(
            f"| {lv.concurrency}{busy} | {lv.steps_per_s:,.0f} | {lv.requests_per_s:,.1f} | {lv.p50_ms:.1f} "
            f"| {lv.p95_ms:.1f} | {lv.p99_ms:.1f} | {lv.errors} | {ratio} | {lv.server_cpu_ms_per_request:.1f} "
            f"| {lv.cpu.client_pct:.0f} % | {lv.cpu.server_pct:.0f} % | {pg} | {lv.cpu.other_pct:.0f} % |"
        )
    return "\n".join([head, *rows])


def _floor_table(report: Report) -> str:
    lines = [
        "| backend | rows | rows/s | txn p50 ms | txn p99 ms | best HTTP / floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for backend, floor in report.floors.items():
        best = max((lv.steps_per_s for d in report.deployments if d.backend == backend for lv in d.levels), default=0.0)
        lines.append(
            f"| {backend} | {floor.rows:,} | {floor.rows_per_s:,.0f} | {floor.txn_p50_ms:.1f} "
            f"| {floor.txn_p99_ms:.1f} | {best / floor.rows_per_s:.0%} |"
        )
    return "\n".join(lines)


def _clients(n: int) -> str:
    return f"{n} client" if n == 1 else f"{n} clients"


def _verdict(report: Report) -> list[str]:
    """Plain statements against the issue's targets, computed from the numbers."""
    lines = []
    for dep in report.deployments:
        best = max(dep.levels, key=lambda lv: lv.steps_per_s)
        under = [str(lv.concurrency) for lv in dep.levels if lv.p99_ms < TARGET_P99_MS]
        fast = best.steps_per_s >= TARGET_STEPS_PER_S
        where = f"{', '.join(under)} {'client' if under == ['1'] else 'clients'}" if under else "no concurrency level"
        lines.append(
            f"- {dep.label}: best {best.steps_per_s:,.0f} steps/s ({_clients(best.concurrency)}), "
            f"{'meets' if fast else 'misses'} {TARGET_STEPS_PER_S:,} steps/s; "
            f"p99 < {TARGET_P99_MS:.0f} ms at {where}."
        )
    return lines


def render_markdown(report: Report) -> str:
    m, cfg = report.machine, report.config
    parts = [
        *opening(
            "Ingest",
            report,
            "`--quick` is a ~1 minute smoke run",
            " Profile the same load: `python -m bench.ingest --profile DIR` (needs `pip install py-spy`).",
        ),
        f"- Workload: {cfg['batch_steps']}-step batches with explicit indexes, "
        f"{cfg['batches_per_trajectory']} batches per trajectory (the first creates it, the rest "
        "append), then an outcome call closes it (outcome calls are not counted in steps/s, req/s "
        f"or latency). Mean step {report.step_bytes:,.0f} bytes of JSON (observation 300-600 chars, "
        "thought ~80, result ~100, small state dict, text action or tool-call object), "
        "deterministic (seeded).",
        f"- Each level: {cfg['warmup_s']:g} s warm-up, then {cfg['duration_s']:g} s measured; only 2xx "
        "answers completed inside the window count. Errors: non-2xx or transport errors during "
        "the level, warm-up included. One database per deployment, shared by its three levels.",
        "- Server: `python -m uvicorn service.app:create_app --factory --no-access-log --log-level "
        "warning` (like `reflexa serve`), the API tier alone: `REFLEXA_WORKER__IN_PROCESS=false` (the "
        "`trajectory.closed` jobs wait in the queue instead of being embedded on the same two cores) and "
        "`REFLEXA_EMBEDDING__BACKEND=hashing` (ingest never calls the model; this skips loading it). "
        "Clients: one thread and keep-alive connection each, pre-encoded bodies, on the same machine.",
        f"- CPU columns are % of one core over the measured window ({m.cores} cores = {100 * m.cores} %): "
        "client = the benchmark process, server = uvicorn process(es), PG backends = PostgreSQL "
        "processes serving the benchmark database, other = the rest of the machine (PostgreSQL's "
        "WAL writer and checkpointer, kernel, anything else running). Server CPU ms/req = server "
        "CPU time / requests answered (outcome calls included).",
        "",
    ]
    for dep in report.deployments:
        parts += [f"### {dep.label}", "", _table(dep, report.floors.get(dep.backend)), ""]
        if dep.backend == "postgres":
            churn = ", ".join(
                f"{_clients(lv.concurrency)}: +{lv.cpu.pg_connections_opened}/-{lv.cpu.pg_connections_closed}"
                for lv in dep.levels
            )
            parts += [f"PostgreSQL backends opened/closed during the window (pool churn): {churn}.", ""]
    if any(lv.cpu.other_pct > BUSY_OTHER_PCT for d in report.deployments for lv in d.levels):
        parts += [
            f"⚠ other work used more than {BUSY_OTHER_PCT:.0f} % of a core during that level: the machine "
            "was shared, its numbers understate the server.",
            "",
        ]
    parts += [
        "### Raw floor (SQLAlchemy core, one process)",
        "",
        "The same step rows, `insert(Step)` executemany, one 50-row transaction each, the server's "
        "engine settings, a fresh database; only the step transactions are timed.",
        "",
        _floor_table(report),
        "",
        f"Against the targets ({TARGET_STEPS_PER_S:,} steps/s, p99 < {TARGET_P99_MS:.0f} ms per 50-step "
        "request), computed:",
        "",
        *_verdict(report),
    ]
    for dep in report.deployments:
        for lv in dep.levels:
            if lv.errors:
                parts.append(
                    f"- Errors, {dep.label}, {_clients(lv.concurrency)}: {lv.error_kinds}; first: `{lv.first_error}`"
                )
    return "\n".join(parts) + "\n"


def render_profiles(report: Report, profile_dir: Path) -> str:
    """Per level: where the server's GIL-held time went (py-spy was attached, so these
    levels' throughput numbers are perturbed and not for the results table)."""
    parts = [f"# Ingest profiles ({report.machine.date}), raw py-spy files in {profile_dir}", ""]
    for dep_result in report.deployments:
        dep = Deployment(dep_result.backend, dep_result.workers)
        for lv in dep_result.levels:
            raw = profile_dir / _profile_name(dep, lv.concurrency)
            parts += [
                f"## {dep.label}, {_clients(lv.concurrency)}: {lv.steps_per_s:,.0f} steps/s, "
                f"p99 {lv.p99_ms:.1f} ms, server {lv.server_cpu_ms_per_request:.2f} CPU ms/request",
                "",
                pyspy.markdown_table(raw, rate=pyspy.RATE_HZ, window_s=lv.window_s, requests=lv.answered)
                if raw.exists()
                else "(no profile)",
                "",
            ]
    return "\n".join(parts)


# -- main --------------------------------------------------------------------------------------


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(cfg: Config, backends: list[str], command: str, quick: bool, profile_dir: Path | None) -> Report:
    started = time.perf_counter()
    machine = MachineFacts.collect(with_postgres="postgres" in backends)
    workload = Workload(cfg)
    deployments: list[DeploymentResult] = []
    floors: dict[str, FloorResult] = {}
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_servers_") as work:
        for backend in backends:
            floors[backend] = raw_floor(backend, dbs, workload)
            _progress(f"  {backend} raw floor: {floors[backend].rows_per_s:,.0f} rows/s")
            for dep in DEPLOYMENTS:
                if dep.backend == backend:
                    deployments.append(run_deployment(dep, dbs, workload, Path(work), profile_dir))
    wall = time.perf_counter() - started
    return Report(command, quick, asdict(cfg), machine, workload.step_bytes, deployments, floors, wall)


def _parse(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = suite_parser("ingest", __doc__, SECTION, SIZES, out="Without it the markdown is printed.")
    parser.add_argument(
        "--patience",
        type=float,
        metavar="SECONDS",
        help="wait this long at most, per level, for other work on the machine to stop (default 15, --quick 2)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        choices=["sqlite", "postgres"],
        help="only this backend (repeatable); default both",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="attach py-spy to the server in every measured window, write raw profiles "
        "to DIR and print where the time goes (numbers are perturbed: no .md output)",
    )
    args = parser.parse_args(argv)
    if args.profile and any(p.suffix != ".json" for p in args.out):
        parser.error("--profile perturbs the numbers; it only writes .json results, not markdown")
    if args.profile and not pyspy.available():
        parser.error("--profile needs py-spy on PATH (pip install py-spy)")
    return parser, args


def main(argv: list[str] | None = None) -> int:
    parser, args = _parse(argv)
    backends = args.backend or (["sqlite"] if args.smoke else ["sqlite", "postgres"])
    command = reproduce_command(parser, args, *(f" --backend {b}" for b in args.backend or []))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    cfg = SIZES.pick(args)
    if args.patience is not None:
        cfg = dataclasses.replace(cfg, quiet_wait_s=args.patience)
    report = run(cfg, backends, command, args.quick or args.smoke, args.profile)
    _progress(f"  done in {report.wall_s:.0f} s")
    markdown = render_markdown(report)
    write_outputs(args.out, SECTION, asdict(report), markdown)
    if args.profile:
        print(render_profiles(report, args.profile))
    elif not args.out:
        print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
