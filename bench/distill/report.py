"""bench.distill's section of docs/benchmarks/distill.md, and its verdicts (the summary it prints)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from bench.common.cpu import BUSY_OTHER_PCT
from bench.common.report import Table, opening
from bench.distill.http_runs import TEACHERS
from service.distill.contexts.schemas import TeacherSpec

if TYPE_CHECKING:
    from bench.distill.results import BackendResult, Report

FLAT_MB = 32.0  # an export's RSS growth below this (or a quarter of its size) counts as flat
TEACHER_KEYS = [TeacherSpec(**t).key for t in TEACHERS]


def _label(backend: str) -> str:
    return "SQLite" if backend == "sqlite" else "PostgreSQL"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x == x else "–"


def contexts_p50(r: BackendResult) -> tuple[float, float, float]:
    """(p50 seconds, fastest, slowest) of the measured batches (median_low: a batch that ran)."""
    seconds = [c.seconds for c in r.contexts]
    return statistics.median_low(seconds), min(seconds), max(seconds)


def floor_p50(r: BackendResult) -> float:
    return statistics.median_low([f.total_s for f in r.floors])


def _setup_table(report: Report) -> list[str]:
    table = Table(
        "backend | background trajectories (steps) | ingest s | reflection jobs | drain s | reflections after "
        "the drain | rollout trajectories (steps) | snapshot s | rows copied: reflections / embeddings / evidence "
        "/ trajectories",
        "lrrrrlrrr",
    )
    for r in report.results:
        kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(r.drain.reflections.items()))
        c = r.snapshot.copied
        table.row(
            f"{r.backend} | {r.background.trajectories:,} ({r.background.steps:,}) | {r.background.seconds:.1f} "
            f"| {r.drain.jobs:,} | {r.drain.drain_s:.1f} | {kinds} | {r.rollouts.trajectories:,} "
            f"({r.rollouts.steps:,}) | {r.snapshot.seconds:.2f} | {c.get('reflections', 0):,} / "
            f"{c.get('embeddings', 0):,} / {c.get('evidence', 0):,} / {c.get('trajectories', 0):,}"
        )
    return table.lines


def _contexts_table(report: Report) -> list[str]:
    applicable = " | ".join(f"{k} applied" for k in TEACHER_KEYS)
    table = Table(
        f"backend | batch | trajectories | steps | contexts | s | steps/s | contexts/s | response MB | server CPU "
        f"| other CPU | {applicable} | memory items/step | floor s | ours / floor",
        "ll" + "r" * (12 + len(TEACHER_KEYS)),
    )
    for r in report.results:
        rows = [*zip(r.contexts, r.floors, strict=True), (r.repeat, r.repeat_floor)]
        for c, f in rows:
            busy = " ⚠" if c.cpu.other_pct > BUSY_OTHER_PCT else ""
            shares = " | ".join(f"{c.applicable.get(k, 0) / c.steps:.0%}" for k in TEACHER_KEYS)
            table.row(
                f"{r.backend} | {c.label}{busy} | {c.trajectories} | {c.steps:,} | {c.contexts:,} | {c.seconds:.2f} "
                f"| {c.steps_per_s:,.0f} | {c.contexts_per_s:,.0f} | {c.response_bytes / 1e6:.1f} "
                f"| {c.cpu.server_pct:.0f} % | {c.cpu.other_pct:.0f} % | {shares} "
                f"| {c.memory_items / c.steps:.1f} | {f.total_s:.2f} | {_pct(f.total_s / c.seconds)}"
            )
        p50, lo, hi = contexts_p50(r)
        c0 = r.contexts[0]
        table.row(
            f"{r.backend} | **p50 of {len(r.contexts)}** (spread) | {c0.trajectories} | {c0.steps:,} "
            f"| {c0.contexts:,} | **{p50:.2f}** ({lo:.2f}–{hi:.2f}) | {c0.steps / p50:,.0f} "
            f"| **{c0.contexts / p50:,.0f}** | | | |" + " |" * len(TEACHER_KEYS) + f" | {floor_p50(r):.2f} "
            f"| **{_pct(floor_p50(r) / p50)}**"
        )
    return table.lines


def warm_p50(r: BackendResult) -> tuple[float, float, float]:
    """p50 seconds of the warm-cache runs: (default form, parts, floor)."""
    d = statistics.median_low([c.seconds for c in r.again])
    p = statistics.median_low([c.seconds for c in r.parts])
    return d, p, statistics.median_low([f.total_s for f in r.warm_floors])


def _forms_table(report: Report) -> list[str]:
    table = Table(
        "backend | batch | default s | MB | parts s | MB | parts bytes / default | floor s | ours / floor, default "
        "| ours / floor, parts",
        "ll" + "r" * 8,
    )
    for r in report.results:
        for c, p, f in zip(r.again, r.parts, r.warm_floors, strict=True):
            table.row(
                f"{r.backend} | {c.label} | {c.seconds:.2f} | {c.response_bytes / 1e6:.1f} | {p.seconds:.2f} "
                f"| {p.response_bytes / 1e6:.1f} | {_pct(p.response_bytes / c.response_bytes)} | {f.total_s:.2f} "
                f"| {_pct(f.total_s / c.seconds)} | {_pct(f.total_s / p.seconds)}"
            )
        if r.parts:
            d, p50, fl = warm_p50(r)
            table.row(
                f"{r.backend} | **p50 of {len(r.parts)}** | {d:.2f} | | **{p50:.2f}** | | | {fl:.2f} "
                f"| {_pct(fl / d)} | **{_pct(fl / p50)}**"
            )
    return table.lines


def _floor_table(report: Report) -> list[str]:
    table = Table(
        "backend | batch | steps | query texts (cache hits incl.) | reads s | encode s | exact search s "
        "| candidate reads s | candidate rows | total s | steps/s | contexts/s",
        "ll" + "r" * 10,
    )
    for r in report.results:
        for c, f in [*zip(r.contexts, r.floors, strict=True), (r.repeat, r.repeat_floor)]:
            table.row(
                f"{r.backend} | {c.label} | {f.steps:,} | {f.texts:,} | {f.reads_s:.3f} | {f.encode_s:.2f} "
                f"| {f.search_s:.3f} | {f.candidates_s:.3f} | {f.candidate_rows:,} | {f.total_s:.2f} "
                f"| {f.steps / f.total_s:,.0f} | {f.steps * (1 + len(TEACHERS)) / f.total_s:,.0f}"
            )
    return table.lines


def _export_table(report: Report) -> list[str]:
    table = Table(
        "backend | dataset | format | rows | MB | s | first byte ms | rows/s | MB/s | floor trajectories (steps) "
        "| floor MB | floor s | ours / floor | server RSS before MB | peak MB | peak − before MB",
        "lll" + "r" * 13,
    )
    for r in report.results:
        for e in r.exports:
            f = r.export_floors[e.dataset]
            table.row(
                f"{r.backend} | {e.dataset} | {e.format} | {e.rows:,} | {e.bytes / 1e6:.1f} | {e.seconds:.2f} "
                f"| {1000 * e.first_byte_s:.0f} | {e.rows_per_s:,.0f} | {e.mb_per_s:.1f} | {f.trajectories:,} "
                f"({f.steps:,}) | {f.bytes / 1e6:.1f} | {f.seconds:.2f} | {_pct(f.seconds / e.seconds)} "
                f"| {e.rss_before_mb:.0f} | {e.rss_peak_mb:.0f} | {e.rss_peak_mb - e.rss_before_mb:+.0f}"
            )
    return table.lines


def verdicts(report: Report) -> list[str]:
    out = []
    for r in report.results:
        p50, lo, hi = contexts_p50(r)
        c0, fl = r.contexts[0], floor_p50(r)
        out.append(
            f"- {_label(r.backend)}, contexts: **{c0.contexts / p50:,.0f} contexts/s** ({c0.steps / p50:,.0f} steps/s; "
            f"{c0.trajectories} × {c0.steps // c0.trajectories} steps, {len(TEACHERS)} teachers, p50 {p50:.2f} s, "
            f"{lo:.2f}–{hi:.2f} s over {len(r.contexts)} batches) against the floor's {c0.contexts / fl:,.0f} "
            f"contexts/s: ours / floor = **{fl / p50:.2f}** (the request takes {p50 / fl:.1f}× the floor's time; "
            f"the floor's encode is {statistics.fmean(f.encode_s / f.total_s for f in r.floors):.0%} of it)."
        )
        if r.parts:
            d, p50, warm_fl = warm_p50(r)
            pairs = zip(r.parts, r.again, strict=True)
            shrink = statistics.fmean(p.response_bytes / c.response_bytes for p, c in pairs)
            out.append(
                f"- {_label(r.backend)}, contexts on a warm embedding cache: the default form p50 {d:.2f} s, "
                f'`include: ["parts"]` {p50:.2f} s with {shrink:.0%} of its bytes, the floor {warm_fl:.2f} s: '
                f"ours / floor = {warm_fl / d:.2f} and **{warm_fl / p50:.2f}** (aim: at least 0.8)."
            )
        ratios = {f"{e.dataset}/{e.format}": r.export_floors[e.dataset].seconds / e.seconds for e in r.exports}
        worst, best = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
        big = max(r.exports, key=lambda e: e.bytes)
        grew = max(e.rss_peak_mb - e.rss_before_mb for e in r.exports)
        moved = big.rss_peak_mb - big.rss_before_mb
        flat = moved < max(FLAT_MB, big.bytes / 1e6 / 4)
        out.append(
            f"- {_label(r.backend)}, export: ours / floor from {ratios[worst]:.2f} ({worst}) to {ratios[best]:.2f} "
            f"({best}); the largest export ({big.dataset}/{big.format}, {big.bytes / 1e6:.1f} MB, "
            f"{big.rows_per_s:,.0f} rows/s, {big.mb_per_s:.1f} MB/s) moved the server's RSS by {moved:+.0f} MB (at "
            f"most {grew:+.0f} MB over every export): "
            + ("memory stays flat while the stream goes." if flat else "**memory grew with the export**.")
        )
    return out


def render_markdown(report: Report) -> str:
    cfg, shape = report.config, report.config["shape"]
    teachers = ", ".join(f"`{t}`" for t in TEACHERS)
    lines = [
        *opening(
            "Distillation: teacher contexts and dataset export",
            report,
            "`--quick` is a smaller memory and 2 batches, a few minutes; `--smoke` is seconds, for tests/bench; "
            "`--backend postgres` for PostgreSQL",
        ),
        "- Server: `python -m uvicorn service.app:create_app --factory --no-access-log --log-level warning` (like "
        "`reflexa serve`) on a fresh migrated database, the default embedder (ONNX all-MiniLM-L6-v2, settings "
        "defaults), its in-process worker off: the reflection queue was drained by `reflexa worker` (default "
        "concurrency) before the rollout batches were ingested, then stopped, so nothing else ran while measuring.",
        f"- Memory (`bench/distill/workload.py`): {shape['background']} background trajectories of "
        f"{shape['steps']} steps on {shape['tasks']} tasks in {shape['environments']} environments (each task a fixed "
        f"route of states, {shape['fresh']:.0%} of the steps a new state), rollout groups of 4-8 with mixed outcomes "
        "(the tasks in turn), "
        "about half the failed attempts retried once (`parent_trajectory_id`, `attempt` 2); reflected by the "
        "offline reflectors (exemplars, contrastive heuristics, evidence cards).",
        f"- Rollout batches: {shape['batch']} trajectories × {shape['steps']} steps in groups of {shape['group']}, "
        f"each batch on tasks of its own, the last quarter of every group a retry of a failed background attempt; a "
        f"warm-up batch of {shape['warm']} (not reported), then {shape['batches']} measured batches, all ingested "
        "before the snapshot, each new to the server's embedding cache but for the task routes' states. Teachers: "
        f'{teachers}; every request under the snapshot (`"snapshot": "{"distill-bench"}"`).',
        "- CPU columns are % of one core over the request (2 cores = 200 %); other = the machine minus the benchmark "
        f"process and the server (PostgreSQL's backends included). ⚠: other work above {BUSY_OTHER_PCT:.0f} % of a "
        "core.",
        "",
        "### Setup: memory and snapshot",
        "",
        "Snapshot s = `POST …/snapshots` answered (copy-on-snapshot: reflections, their embeddings and evidence, every "
        "trajectory's outcome and step count; steps are not copied, the views bound them by step count).",
        "",
        *_setup_table(report),
        "",
        "### Teacher contexts (POST …/distill/contexts)",
        "",
        "One request per batch: the batch's stored trajectories by id, every step; s = request sent -> whole response "
        "received (the client's JSON parse not included). Contexts = steps × (1 plain + "
        f"{len(TEACHERS)} teachers). Applied = steps where the teacher had something to show (otherwise its context "
        "is the plain one). Floor s = the floor below on the same batch, interleaved (order alternating by batch); "
        "ours / floor = floor s / s (throughput against the floor's). The last row repeats batch 1: the embedding "
        "cache knows every text.",
        "",
        *_contexts_table(report),
        "",
        "The same batches asked again right after in both forms, the default (text and messages) and the "
        'shared-history form (`include: ["parts"]`: each trajectory\'s turns once, per step where its window '
        "starts, per teacher its system message), in alternating order, then the floor again: all three on a "
        "warm embedding cache, so these rows time what is left once the query texts are encoded.",
        "",
        *_forms_table(report),
        "",
        "### Raw floor for contexts (one process, no HTTP)",
        "",
        "`bench/distill/floor.py`, in the benchmark process: the batch's trajectories by id, their steps, their "
        "groups' members, each one's earlier attempts (parent chain, else the task's earlier closed trajectories, "
        "the group excluded) and their steps, as SQLAlchemy core reads through the same snapshot views; every step's "
        "query texts (state text and internal state, by the server's functions and settings) in one `encode` call "
        "of `service.container.make_embedder(Settings())` (its cache kept across batches, as the server's is); an "
        "exact search of the snapshot's vectors per (kind, field) (numpy matrix product, top 50 as the server "
        "fetches); the candidate rows of what it found, read as the server reads them for a batch "
        "(`service.retrieval.repository.list_candidates` once with the row filters, `list_citations` once, "
        "each trajectory's "
        "leakage filters applied in Python). No ranking (vector or lexical), rendering or response. "
        + "; ".join(
            f"{r.backend}: the snapshot's {r.floor_vectors:,} vectors loaded once in {r.floor_load_s:.2f} s (not "
            "counted; the server holds its pinned indexes after the warm-up)"
            for r in report.results
        )
        + ".",
        "",
        *_floor_table(report),
        "",
        "### Dataset export (GET …/export)",
        "",
        f"`GET …/export?dataset=D&format=F&snapshot=…` streamed with httpx (`iter_raw`, bytes and lines counted as "
        f"they come; parquet rows from the file's footer); fastest of {cfg['export_reps']}. Floor = the same keyset "
        "batches (500 trajectories, their steps about 5,000 at a time) with the dataset's trajectory filter "
        "(sft: successful; preferences: closed with an outcome; attempts: closed retries and the attempts they "
        "follow), each trajectory with its steps as one orjson line, in this process; ours / floor = floor s / s "
        "(the same source rows read, whatever the dataset builds from them). RSS: the server's VmRSS just before, "
        "and its peak during the stream (VmHWM reset through `/proc/PID/clear_refs` first, and VmRSS sampled every "
        "10 ms). Server RSS after every export: "
        + ", ".join(f"{r.backend} {r.server_rss_mb:.0f} MB" for r in report.results)
        + ".",
        "",
        *_export_table(report),
        "",
        "### Against the issue",
        "",
        *verdicts(report),
    ]
    return "\n".join(lines) + "\n"
