"""Reflection benchmark: jobs per second of the offline reflectors draining a backlog
of closed trajectories, queue lag under a steady ingest load, and the raw floor of
the same reflector work in one process.

    python -m bench.reflect [--quick | --smoke] [--trajectories 10000] [--backend sqlite] [--setups 1x1,1x2,2x1]
                            [--out docs/benchmarks/reflect.md] [--out results.json]

Per backend (SQLite, PostgreSQL): (a) the backlog is ingested with no worker running,
then each worker setup (processes x concurrency of `reflexa worker`) drains its own
copy of it (bench/reflect/drain.py); (b) on the drained database, closed rollout
groups are posted at a ladder of rates, fractions of the best setup's drain rate,
while that setup runs (bench/reflect/lag.py). (c) once: the raw floor
(bench/reflect/floor.py). It measures and reports; it asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.common import plots
from bench.common.cli import Sizes, suite_parser
from bench.common.databases import databases
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_section
from bench.common.processes import OFFLINE_ENV
from bench.reflect.drain import Setup, ingest_backlog, run_drains
from bench.reflect.floor import raw_floor
from bench.reflect.lag import LagPlan, run_lag
from bench.reflect.report import SECTION, Report, render_markdown
from bench.reflect.workload import Shape, groups


@dataclass(frozen=True)
class Config:
    shape: Shape
    setups: tuple[Setup, ...]
    lag_fractions: tuple[float, ...]  # load rates as fractions of the best drain rate
    lag_window_s: float
    lag_slo_s: float
    probe_every_s: float
    ingest_batch: int = 100  # trajectories per batch request (whole groups)
    drain_timeout_s: float = 3 * 3600
    quiet_wait_s: float = 15.0


FULL = Config(
    shape=Shape(),
    setups=(Setup(1, 1), Setup(1, 2), Setup(2, 1)),
    lag_fractions=(0.25, 0.5, 0.75, 1.0, 1.5),
    lag_window_s=60.0,
    lag_slo_s=10.0,
    probe_every_s=2.0,
)
QUICK = Config(
    shape=Shape(trajectories=200, tasks=30, environments=4),
    setups=(Setup(1, 1), Setup(2, 1)),
    lag_fractions=(0.5, 1.5),
    lag_window_s=10.0,
    lag_slo_s=10.0,
    probe_every_s=2.0,
    quiet_wait_s=2.0,
)
# Seconds, not minutes, SQLite only unless --backend says otherwise: only shows that
# every part runs (tests/bench); the numbers mean little.
SMOKE = Config(
    shape=Shape(trajectories=24, tasks=4, environments=2),
    setups=(Setup(1, 1),),
    lag_fractions=(0.5,),
    lag_window_s=3.0,
    lag_slo_s=10.0,
    probe_every_s=1.0,
    quiet_wait_s=0.5,
)
SIZES = Sizes(
    FULL,
    QUICK,
    SMOKE,
    quick_help="200 trajectories, short lag windows: a smoke run",
    smoke_help="24 trajectories, 1 setup, SQLite: tests/bench",
)


def _versions() -> dict[str, str]:
    out = {}
    for name in ("onnxruntime", "tokenizers", "faiss-cpu", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run(cfg: Config, backends: list[str], command: str, skip_lag: bool) -> Report:
    started = time.perf_counter()
    rep = Report(command, 0.0, MachineFacts.collect("postgres" in backends), _versions(), dataclasses.asdict(cfg.shape))
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_reflect_") as tmp:
        work = Path(tmp)
        progress("raw floor")
        rep.floor = raw_floor(groups(cfg.shape), work)
        progress(f"  {rep.floor.trajectories_per_s:.1f} trajectories/s in {rep.floor.total_s:.1f} s")
        for backend in backends:
            progress(f"{backend}: ingesting the backlog")
            source = dbs.url(backend, "backlog")
            rep.ingests[backend] = ingest_backlog(source, work, groups(cfg.shape), cfg.ingest_batch)
            drains, drained = run_drains(
                dbs, backend, source, list(cfg.setups), work,
                quiet_wait_s=cfg.quiet_wait_s, timeout_s=cfg.drain_timeout_s,
            )  # fmt: skip
            rep.drains += drains
            if skip_lag:
                continue
            best = max(drains, key=lambda d: d.trajectories_per_s)
            plan = LagPlan(
                shape=cfg.shape,
                rates=tuple(round(f * best.trajectories_per_s, 2) for f in cfg.lag_fractions),
                window_s=cfg.lag_window_s,
                slo_s=cfg.lag_slo_s,
                probe_every_s=cfg.probe_every_s,
            )
            # Continue on the database the last drain left: a steady state, every job done.
            progress(f"{backend}: queue lag, {best.setup.label}, rates {plan.rates}")
            rep.lags.append(run_lag(drained, backend, best.setup, plan, work))
    rep.wall_s = time.perf_counter() - started
    return rep


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = suite_parser(
        "reflect", __doc__, SECTION, SIZES, out="Plots are written next to the markdown; without one it is printed."
    )
    parser.add_argument("--trajectories", type=int, help="backlog size (default 10000; quick 200)")
    parser.add_argument("--tasks", type=int, help="distinct tasks (default 300)")
    parser.add_argument("--environments", type=int, help="distinct environments (default 20)")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"], help="repeatable; default both")
    parser.add_argument("--setups", help="worker setups, PROCESSESxCONCURRENCY, comma-separated (default 1x1,1x2,2x1)")
    parser.add_argument("--lag-window", type=float, help="seconds per load rate (default 60)")
    parser.add_argument("--skip-lag", action="store_true", help="drains and floor only")
    return parser.parse_args(argv)


def _config(args: argparse.Namespace) -> Config:
    cfg = SIZES.pick(args)
    shape = {k: v for k, v in (("trajectories", args.trajectories), ("tasks", args.tasks)) if v}
    if args.environments:
        shape["environments"] = args.environments
    changes: dict[str, object] = {"shape": dataclasses.replace(cfg.shape, **shape)}
    if args.setups:
        changes["setups"] = tuple(Setup.parse(s) for s in args.setups.split(","))
    if args.lag_window:
        changes["lag_window_s"] = args.lag_window
    return dataclasses.replace(cfg, **changes)


def _command(argv: list[str], outs: list[Path]) -> str:
    """The reproducing command: the arguments given, minus --out, plus markdown outputs."""
    kept = [a for i, a in enumerate(argv) if a != "--out" and (i == 0 or argv[i - 1] != "--out")]
    return " ".join(["python -m bench.reflect", *kept, *(f"--out {p}" for p in outs if p.suffix == ".md")])


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    cfg = _config(args)
    backends = args.backend or (["sqlite"] if args.smoke else ["sqlite", "postgres"])
    os.environ.update(OFFLINE_ENV)
    rep = run(cfg, backends, _command(argv if argv is not None else sys.argv[1:], args.out), args.skip_lag)
    progress(f"done in {rep.wall_s / 60:.1f} min")
    for path in args.out:
        if path.suffix == ".json":
            path.write_text(json.dumps(rep.as_json(), indent=2, default=str))
        else:
            rep.plots = plots.reflect(rep, path.parent)
            write_section(path, SECTION, render_markdown(rep))
    if not any(p.suffix == ".md" for p in args.out):
        print(render_markdown(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
