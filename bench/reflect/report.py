"""The docs/benchmarks/reflect.md section of bench.reflect, rendered from its report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common.machine import MachineFacts
from bench.common.report import Table, opening
from bench.reflect.drain import DrainResult, IngestResult
from bench.reflect.floor import FloorResult
from bench.reflect.lag import LagResult
from bench.reflect.queue import CLOSED

SECTION = "reflect"


@dataclass
class Report:
    command: str
    wall_s: float
    machine: MachineFacts
    versions: dict[str, str]
    shape: dict[str, Any]
    ingests: dict[str, IngestResult] = field(default_factory=dict)
    drains: list[DrainResult] = field(default_factory=list)
    floor: FloorResult | None = None
    lags: list[LagResult] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # image paths relative to the markdown file

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _drain_table(rep: Report) -> list[str]:
    floor = rep.floor.trajectories_per_s if rep.floor else float("nan")
    table = Table(
        "backend | workers | jobs | drain s | jobs/s | trajectories/s | steps/s | exemplar vectors/s "
        "| startup s | vs floor | worker CPU | PG CPU | other CPU | failed",
        "ll" + "r" * 12,
    )
    for d in rep.drains:
        pg = f"{d.cpu.postgres_pct:.0f} %" if d.backend == "postgres" else "–"
        table.row(
            f"{d.backend} | {d.setup.label} | {d.jobs:,} | {d.drain_s:,.1f} | {d.jobs_per_s:,.1f} "
            f"| {d.trajectories_per_s:,.1f} | {d.steps_per_s:,.0f} | {d.vectors / d.drain_s:,.0f} | {d.startup_s:.1f} "
            f"| {d.trajectories_per_s / floor:.0%} | {d.worker_cpu_pct:.0f} % | {pg} | {d.cpu.other_pct:.0f} % "
            f"| {d.failed}"
        )
    return table.lines


def _kinds_table(rep: Report) -> list[str]:
    table = Table("backend | workers | job kind | jobs | share of the drain | jobs/s", "lllrrr")
    for d in rep.drains:
        for k in d.kinds:
            table.row(
                f"{d.backend} | {d.setup.label} | `{k.kind}` | {k.jobs:,} | {k.seconds / d.drain_s:.0%} "
                f"| {k.per_s:,.1f}"
            )
    return table.lines


def _floor_lines(f: FloorResult) -> list[str]:
    table = Table("part | seconds | share", "lrr")
    for part, s in f.seconds.items():
        table.row(f"{part} | {s:,.2f} | {s / f.total_s:.0%}")
    table.row(f"**total** | **{f.total_s:,.1f}** |")
    return [
        *table.lines,
        "",
        f"Floor: {f.trajectories:,} trajectories ({f.steps:,} steps, {f.exemplars:,} distinct exemplars, "
        f"{f.texts:,} texts encoded) in {f.total_s:,.1f} s = **{f.trajectories_per_s:,.1f} trajectories/s, "
        f"{f.steps_per_s:,.0f} steps/s**.",
    ]


def _lag_table(lag: LagResult) -> list[str]:
    table = Table(
        "rate asked /s | achieved /s | trajectories | lag p50 s | p95 s | max s | not done | probe p50 ms "
        "| probe p95 ms | oldest `trajectory.closed` at end s | oldest other job at end s | sustainable",
        "r" * 11 + "l",
    )
    for lv in lag.levels:
        others = max((age for kind, age in lv.oldest_end_s.items() if kind != CLOSED), default=0.0)
        table.row(
            f"{lv.rate:,.1f} | {lv.achieved_rate:,.1f} | {lv.posted:,} | {lv.lag.p50_ms / 1000:.1f} "
            f"| {lv.lag.p95_ms / 1000:.1f} | {lv.lag.max_ms / 1000:.1f} | {lv.not_done} | {lv.probe.p50_ms:,.0f} "
            f"| {lv.probe.p95_ms:,.0f} | {lv.oldest_end_s.get(CLOSED, 0.0):.1f} | {others:.1f} "
            f"| {'yes' if lv.sustainable else '**no**'}"
        )
    best = lag.max_sustainable
    return [
        *table.lines,
        "",
        f"Max sustainable rate ({lag.backend}, {lag.setup.label}): "
        + (f"**{best:,.1f} trajectories/s**" if best is not None else "**none of the rates tried**")
        + f" (lag SLO {lag.slo_s:g} s).",
    ]


def render_markdown(rep: Report) -> str:
    s, m = rep.shape, rep.machine
    lines = [
        *opening("Reflection workers", rep, "`--quick` is a smoke run of a few minutes"),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in rep.versions.items()),
        f"- Workload: {s['trajectories']:,} closed trajectories (`bench/reflect/workload.py`): {s['tasks']} tasks "
        f"in {s['environments']} environments, each task a fixed route of 10-20 states (text-game, grid and web "
        f"states), {s['fresh']:.0%} of the steps a new state and the rest revisits, rollout groups of "
        f"{s['group_min']}-{s['group_max']} siblings (`group_id`), mixed outcomes (a wrong action ends the "
        "episode 1 time in 3, flagged `caused_failure`), deterministic.",
        "- Ingest: through `POST …/trajectories/batch` into the API tier alone (worker off), so every job "
        "waits; then `reflexa worker --concurrency N` processes (default settings: ONNX MiniLM, 1 intra-op "
        "thread, 100k-entry text cache, offline reflectors only) drain a copy of that database each.",
        "- Drain s: workers started -> last job done (startup = workers started -> first job done: process start "
        "and model load). Per job kind: the wall-clock before each completion is attributed to the kind that "
        "completed, so the shares add up to the drain. CPU in % of one core over the drain "
        f"({m.cores} cores = {100 * m.cores} %).",
        "",
    ]
    for backend, ing in rep.ingests.items():
        lines.append(
            f"Backlog ({backend}): {ing.trajectories:,} trajectories, {ing.steps:,} steps ingested in "
            f"{ing.seconds:.0f} s."
        )
    lines += ["", "### Draining a backlog", "", *_drain_table(rep), "", *_kinds_table(rep), ""]
    if rep.drains:
        produced = ", ".join(f"{k}: {n:,}" for k, n in sorted(rep.drains[-1].reflections.items()))
        lines += [f"Reflections after a drain: {produced}.", ""]
    if rep.floor:
        lines += [
            "### Raw floor (same reflector work in one process: no HTTP, queue or SQL)",
            "",
            "`build_exemplars` over every trajectory, the new exemplars' texts through the worker's embedder "
            "(one call), their state vectors into a `VectorIndex`, `contrastive.find` once per environment and "
            "`build_card` once per task (what a perfectly coalesced drain does). Vs floor in the drain table = "
            "drain trajectories/s / floor trajectories/s.",
            "",
            *_floor_lines(rep.floor),
            "",
        ]
    for lag in rep.lags:
        lines += [
            f"### Queue lag under steady ingest ({lag.backend}, {lag.setup.label})",
            "",
            f"On the drained database, an API server (worker off, ONNX embedder) and the workers; closed rollout "
            f"groups posted at each rate for {lag.window_s:g} s. Lag = a `trajectory.closed` job's enqueue "
            "(in the closing transaction) -> done (then searchable), every trajectory of the window, from the "
            "jobs table; probe = a client closing a one-step trajectory and retrieving with its consistency "
            "token (write acknowledged -> answer). Not done = still queued when the benchmark stopped waiting. "
            "Oldest other job = contrastive and evidence-card recounts, which wait behind indexing by priority. "
            "The ladder stops at the first rate that is not sustainable.",
            "",
            *_lag_table(lag),
            "",
        ]
    lines += [f"![{p}]({p})" for p in rep.plots]
    return "\n".join(lines).rstrip() + "\n"
