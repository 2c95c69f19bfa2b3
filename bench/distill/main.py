"""Distillation benchmark: teacher contexts per second for a rollout batch of 64
trajectories × 20 steps with 3 teacher kinds, and dataset export rows per second,
each against its raw floor measured in the same run.

    python -m bench.distill [--quick | --smoke] [--backend sqlite|postgres]
                            [--out docs/benchmarks/distill.md] [--out r.json]

Per backend (SQLite by default; `--backend postgres` for PostgreSQL at
REFLEXA_BENCH_PG_URL, repeatable), on a fresh database:

1. Setup. A real uvicorn server (like `reflexa serve`; the default ONNX embedder; its
   in-process worker off) and a background memory ingested through
   `POST …/trajectories/batch` (bench/distill/workload.py: rollout groups with mixed
   outcomes, retries naming their parent attempt), then `reflexa worker` draining the
   reflection queue (exemplars, contrastive heuristics, evidence cards) and stopped;
   then the rollout batches (a warm-up batch and the measured ones), then
   `POST …/snapshots`: its time and the rows it copied.
2. Contexts. `POST …/distill/contexts` under the snapshot for each measured batch (64
   stored trajectories by id, teachers memory, hindsight@2, attempt_summary): steps/s
   and contexts/s (steps × (1 + teachers)), p50 and spread over the batches; each
   batch then again in both forms, the default and `include: ["parts"]` (each
   history stated once), on a warm embedding cache, with the floor on a warm cache. Every
   batch is new to the server's embedding cache but for the route states it revisits;
   the last row repeats the first batch (the cache warm).
3. The contexts floor, interleaved batch by batch (bench/distill/floor.py): the same
   reads as SQLAlchemy core, the same query texts through the server's embedder in
   one call, an exact numpy search of the snapshot's vectors, the candidate reads.
4. Export. `GET …/export?snapshot=…` for every dataset in jsonl and parquet, streamed
   (httpx): rows/s, MB/s, and the server's RSS before and at its peak during the
   stream; against the floor: the same keyset reads serialised with orjson.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from bench.common.api import NAMESPACE, headers
from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.cpu import wait_for_quiet
from bench.common.databases import Databases, databases
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_outputs
from bench.common.processes import proc_memory_mb, server
from bench.common.report import summary
from bench.distill.floor import ContextsFloor, copied_rows, export_floor
from bench.distill.http_runs import (
    DATASETS,
    FORMATS,
    Target,
    post_contexts,
    stream_export,
    take_snapshot,
)
from bench.distill.report import render_markdown, verdicts
from bench.distill.results import BackendResult, Ingested, Report
from bench.distill.workload import Shape, Trajectory, Workload
from bench.reflect.drain import Setup, drain, post_batch
from migrations import upgrade
from store.database import create_db_engine

SECTION = "distill"
SNAPSHOT_ID = "distill-bench"
PARTS = ["parts"]  # the shared-history form, measured beside the default
API_ENV = {"REFLEXA_WORKER__IN_PROCESS": "false"}  # the drain runs in `reflexa worker`, stopped before measuring


@dataclass(frozen=True)
class Config:
    shape: Shape
    export_reps: int  # each export is run this often; the fastest counts
    quiet_wait_s: float
    drain_timeout_s: float
    ingest_batch: int = 100  # trajectories per POST …/trajectories/batch


FULL = Config(Shape(1000, 20, 100, 10, batch=64, group=8, batches=5, warm=16), 2, 10.0, 900.0)
QUICK = Config(Shape(120, 20, 30, 6, batch=64, group=8, batches=2, warm=8), 1, 2.0, 600.0)
# Seconds: shows that every part runs (tests/bench); the numbers mean little.
SMOKE = Config(Shape(24, 5, 6, 3, batch=8, group=4, batches=1, warm=4), 1, 0.5, 120.0)
SIZES = Sizes(
    FULL,
    QUICK,
    SMOKE,
    quick_help="a smaller memory, 2 batches: a few minutes",
    smoke_help="tiny, SQLite only: seconds, for tests/bench",
)


def _ingest(client: httpx.Client, trajectories: list[Trajectory], batch: int, into: Ingested) -> None:
    t0 = time.perf_counter()
    for start in range(0, len(trajectories), batch):
        chunk = trajectories[start : start + batch]
        post_batch(client, chunk)
        into.trajectories += len(chunk)
        into.steps += sum(len(t["steps"]) for t in chunk)
    into.seconds += time.perf_counter() - t0


def _first(fmt: str) -> dict[str, str | int]:
    return {"dataset": "trajectories", "format": fmt, "snapshot": SNAPSHOT_ID, "limit": 10}


def run_backend(backend: str, cfg: Config, dbs: Databases, work: Path, floor_embedder: Any) -> BackendResult:
    from service.settings import WorkerSettings

    url = dbs.url(backend, "distill")
    upgrade(url)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    pg_database = make_url(url).database if backend == "postgres" else None
    wl = Workload(cfg.shape)
    engine = create_db_engine(url)  # the server's engine settings, for the floors
    try:
        with (
            server(url, key, work, env=API_ENV) as srv,
            httpx.Client(base_url=srv.url, headers=headers(key), timeout=900) as client,
        ):
            target = Target(srv.pid, pg_database)
            client.post("/v1/namespaces", json={"name": NAMESPACE}).raise_for_status()
            background = Ingested()
            _ingest(client, [t for group in wl.background() for t in group], cfg.ingest_batch, background)
            progress(f"  {backend}: {background.trajectories} background trajectories in {background.seconds:.1f} s")
            setup = Setup(1, WorkerSettings().concurrency)
            drained = drain(url, backend, setup, work, quiet_wait_s=cfg.quiet_wait_s, timeout_s=cfg.drain_timeout_s)
            progress(f"  {backend}: {drained.jobs} reflection jobs drained in {drained.drain_s:.1f} s")
            warm, batches = wl.rollout_batches()
            rollouts = Ingested()
            _ingest(client, warm + [t for b in batches for t in b], cfg.ingest_batch, rollouts)
            snap = take_snapshot(client, SNAPSHOT_ID)
            floor = ContextsFloor(engine, NAMESPACE, SNAPSHOT_ID, floor_embedder)
            snap.copied = copied_rows(engine, floor.snap.pk)
            progress(f"  {backend}: snapshot in {snap.seconds:.2f} s, copied {snap.copied}")
            # warm-up (not measured): the server loads the snapshot's pinned indexes, both encoders their arenas
            warm_ids = [t["id"] for t in warm]
            warm_run = post_contexts(client, target, "warm-up", SNAPSHOT_ID, warm_ids)
            floor.run(warm_ids)
            runs, floors = [], []
            again, parts, warm_floors = [], [], []  # ContextsRun, ContextsRun, ContextsFloorRun
            for i, b in enumerate(batches):
                ids = [t["id"] for t in b]
                wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
                if i % 2:  # alternate who goes first
                    floors.append(floor.run(ids))
                    runs.append(post_contexts(client, target, f"batch {i + 1}", SNAPSHOT_ID, ids))
                else:
                    runs.append(post_contexts(client, target, f"batch {i + 1}", SNAPSHOT_ID, ids))
                    floors.append(floor.run(ids))
                # the two forms again, both on a warm embedding cache (the first run filled it), order alternating
                forms = [(again, "again", None), (parts, "parts", PARTS)]
                for into, name, include in forms if i % 2 else forms[::-1]:
                    into.append(post_contexts(client, target, f"batch {i + 1}, {name}", SNAPSHOT_ID, ids, include))
                warm_floors.append(floor.run(ids))
                progress(
                    f"  {backend}: batch {i + 1}: {runs[-1].seconds:.2f} s = {runs[-1].contexts_per_s:,.0f} "
                    f"contexts/s ({runs[-1].response_bytes / 1e6:.1f} MB); floor {floors[-1].total_s:.2f} s; warm: "
                    f"again {again[-1].seconds:.2f} s, parts {parts[-1].seconds:.2f} s "
                    f"({parts[-1].response_bytes / 1e6:.1f} MB), floor {warm_floors[-1].total_s:.2f} s"
                )
            first = [t["id"] for t in batches[0]]
            repeat = post_contexts(client, target, "batch 1 again", SNAPSHOT_ID, first)
            repeat_floor = floor.run(first)
            result = BackendResult(
                backend, background, rollouts, drained, snap, floor.load_s, floor.vectors, warm_run, runs, floors,
                repeat, repeat_floor, again, parts, warm_floors,
            )  # fmt: skip
            for fmt in FORMATS:  # warm-up (not measured): the first parquet export imports and sets up pyarrow
                with client.stream("GET", f"/v1/namespaces/{NAMESPACE}/export", params=_first(fmt)) as r:
                    r.raise_for_status()
                    r.read()
            for dataset in DATASETS:
                result.export_floors[dataset] = min(
                    (export_floor(engine, NAMESPACE, floor.snap.pk, dataset) for _ in range(cfg.export_reps)),
                    key=lambda f: f.seconds,
                )
                for fmt in FORMATS:
                    result.exports.append(
                        min(
                            (stream_export(client, target, dataset, fmt, SNAPSHOT_ID) for _ in range(cfg.export_reps)),
                            key=lambda e: e.seconds,
                        )
                    )
                    e = result.exports[-1]
                    progress(
                        f"  {backend}: export {dataset}/{fmt}: {e.rows:,} rows, {e.bytes / 1e6:.1f} MB in "
                        f"{e.seconds:.2f} s; RSS {e.rss_before_mb:.0f} -> {e.rss_peak_mb:.0f} MB"
                    )
            result.server_rss_mb = proc_memory_mb(srv.pid)[0]
    finally:
        engine.dispose()
    return result


def run(cfg: Config, backends: list[str], command: str, small: bool) -> Report:
    from bench.common.processes import OFFLINE_ENV, share_models
    from service.container import make_embedder
    from service.settings import Settings

    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    report = Report(command, small, asdict(cfg), MachineFacts.collect(with_postgres="postgres" in backends), [])
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_distill_") as tmp:
        work = Path(tmp)

        # The floor's embedder: the server's own construction, a fresh one (empty cache) per
        # backend, as each backend gets a fresh server. The first one also makes the shared
        # ONNX export (first run only) before any server or worker needs it.
        def floor_embedder() -> Any:
            embedder = make_embedder(Settings(data_dir=share_models(work / "floor-data")))
            embedder.encode(["warm"])
            return embedder

        floor_embedder()
        for backend in backends:
            report.results.append(run_backend(backend, cfg, dbs, work, floor_embedder()))
    report.wall_s = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("distill", __doc__, SECTION, SIZES, out="The summary is always printed.")
    parser.add_argument(
        "--backend", action="append", choices=["sqlite", "postgres"], help="this backend (repeatable); default sqlite"
    )
    args = parser.parse_args(argv)
    backends = args.backend or ["sqlite"]
    if args.smoke:
        backends = ["sqlite"]
    cfg = SIZES.pick(args)
    command = reproduce_command(parser, args, *(f" --backend {b}" for b in args.backend or []))
    report = run(cfg, backends, command, args.quick or args.smoke)
    progress(f"  done in {report.wall_s / 60:.1f} min")
    markdown = render_markdown(report)
    write_outputs(args.out, SECTION, asdict(report), markdown)
    print(summary("distill", verdicts(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
