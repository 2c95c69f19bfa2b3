"""Freshness benchmark: how fast closed episodes become searchable on `reflexa serve`
defaults, against the batched encoder's own rate on the same texts, and the
write-ack -> searchable lag under paced ingest with a busy core.

    python -m bench.freshness [--quick | --smoke] [--out docs/benchmarks/freshness.md] [--out results.json]

One `reflexa serve` process with its defaults (SQLite under its data directory,
the in-process worker with its default concurrency, the ONNX encoder on one thread,
closed trajectories claimed in batches of 8 with one encoder call), then:

1. Searchable items/s. Rounds of a backlog of closed 50-step episodes (every step a
   new exemplar: two new texts, its state and its internal state) posted in one
   `POST …/trajectories/batch`; the time until a retrieve with the batch's
   consistency token answers. Interleaved with it (the order rotating by round), the
   floor: in this process, the encoder the server uses (`build_embedder("onnx")`,
   1 thread, batches of 64 inside, no cache) on exactly the texts the worker encodes,
   in the worker's shape (one `encode` call per 8 episodes), with as many callers at
   once as the worker has slots, and with one caller.
2. Lag under load. A busy-loop process spinning one core (started and stopped here,
   a neighbour's CPU-bound job), and closed 50-step episodes posted at paced rates (a
   few fractions of the searchable rate just measured), each by an agent thread that
   then checks for it: every other one with the client's read-your-writes (the
   `reflexa` client: `create_trajectory`, then `retrieve` with its default
   `consistency="session"`, which sends the write's token), the others by polling
   retrieves without a token; write-ack -> searchable p50/p99 for both, and every
   episode's job created -> finished from the jobs table.
3. An awaited job against another namespace's backlog. Still with the busy core: a
   backlog of episodes queued in a second namespace in one batch, then, in the
   agent's namespace, one episode polled for and one retrieved with its token (the
   wait moves its job to `Priority.AWAITED`): their lags, and how much of the
   backlog finished before each.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common.api import headers, wait_token
from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.cpu import wait_for_quiet
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_outputs
from bench.common.processes import OFFLINE_ENV, embedder, server_env_overrides
from bench.common.report import RunFacts, opening
from bench.freshness.runs import (
    BacklogRun,
    K,
    LagLevel,
    SearchableRound,
    backlog_run,
    busy_loops,
    episode,
    episode_texts,
    lag_level,
    probe_text,
    reflexa_serve,
    searchable_round,
    server_rss_mb,
    wait_drained,
)

SECTION = "freshness"
NS, OTHER_NS = "fresh", "other"
AIM_SEARCHABLE_VS_ENCODER = 0.70


@dataclass(frozen=True)
class Config:
    steps: int  # per episode
    backlog: int  # episodes per searchable round
    rounds: int
    rates: tuple[float, ...]  # lag levels, as fractions of the measured searchable episodes/s
    window_s: float  # each lag level
    poll_interval_s: float
    other_backlog: int  # episodes queued in the second namespace
    busy_cores: int
    quiet_wait_s: float


FULL = Config(50, 16, 3, (0.1, 0.25, 0.4), 60.0, 0.1, 40, 1, 15.0)
QUICK = Config(50, 8, 1, (0.25,), 20.0, 0.1, 16, 1, 3.0)
# Seconds: shows that every part runs (tests/bench); the numbers mean little.
SMOKE = Config(5, 2, 1, (0.3,), 2.0, 0.1, 3, 1, 0.5)
SIZES = Sizes(
    FULL,
    QUICK,
    SMOKE,
    quick_help="one round, one lag level: ~3 minutes",
    smoke_help="5-step episodes, 3 s window: seconds, for tests/bench",
)


@dataclass
class Report(RunFacts):
    versions: dict[str, str]
    worker: dict[str, Any]
    wall_s: float = 0.0
    load_avg_start: float = float("nan")
    load_avg_end: float = float("nan")
    quiet_before: float = float("nan")  # other CPU (% of a core) just before the searchable rounds
    rounds: list[SearchableRound] = field(default_factory=list)
    levels: list[LagLevel] = field(default_factory=list)
    backlog: BacklogRun | None = None
    rss_mb: float = float("nan")


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("onnxruntime", "tokenizers", "faiss-cpu", "numpy", "httpx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _worker_facts() -> dict[str, Any]:
    from reflectors.exemplars import BATCH_JOBS
    from service.settings import EmbeddingSettings, WorkerSettings

    env = server_env_overrides()
    w, e = WorkerSettings(), EmbeddingSettings()
    return {
        "concurrency": int(env.get("REFLEXA_WORKER__CONCURRENCY", w.concurrency)),
        "batch_jobs": BATCH_JOBS,
        "threads": int(env.get("REFLEXA_EMBEDDING__THREADS", e.threads)),
        "encode_batch": int(env.get("REFLEXA_EMBEDDING__BATCH_SIZE", e.batch_size)),
        "starved_after_s": w.starved_after_seconds,
    }


def run(cfg: Config, command: str, small: bool) -> Report:
    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    rep = Report(command, small, asdict(cfg), MachineFacts.collect(with_postgres=False), _versions(), _worker_facts())
    rep.load_avg_start = os.getloadavg()[0]
    wk = rep.worker
    enc = embedder(threads=wk["threads"], batch_size=wk["encode_batch"])
    rng = random.Random(53)
    with (
        tempfile.TemporaryDirectory(prefix="reflexa_bench_freshness_") as tmp,
        reflexa_serve(Path(tmp)) as srv,
        httpx.Client(base_url=srv.url, headers=headers(srv.key), timeout=600) as client,
    ):
        _phases(cfg, rep, srv, client, enc, rng)
    rep.load_avg_end = os.getloadavg()[0]
    rep.wall_s = time.perf_counter() - started
    return rep


def _phases(cfg: Config, rep: Report, srv: Any, client: httpx.Client, enc: Any, rng: random.Random) -> None:
    wk = rep.worker
    for ns in (NS, OTHER_NS):
        client.post("/v1/namespaces", json={"name": ns}).raise_for_status()
    # Warm-up: the first job and retrieve load the model's arena and build an empty index.
    warm = episode("warm-0", rng, cfg.steps)
    r = client.post(f"/v1/namespaces/{NS}/trajectories", json=warm)
    r.raise_for_status()
    wait_token(client, NS, r.json()["consistency_token"], probe_text(warm), K, 600).raise_for_status()
    enc.encode(episode_texts(warm))

    progress(f"searchable: {cfg.rounds} rounds of {cfg.backlog} closed {cfg.steps}-step episodes")
    rep.quiet_before = wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    for i in range(cfg.rounds):
        eps = [episode(f"r{i}-{j}", rng, cfg.steps) for j in range(cfg.backlog)]
        rd = searchable_round(srv, client, NS, eps, enc, wk["batch_jobs"], wk["concurrency"], i)
        rep.rounds.append(rd)
        progress(
            f"  round {i}: server {rd.exemplars / rd.server_s:.0f} exemplars/s ({rd.server_s:.1f} s); "
            f"floor {rd.exemplars / rd.floor_parallel_s:.0f}/s with {wk['concurrency']} callers, "
            f"{rd.exemplars / rd.floor_serial_s:.0f}/s with 1"
        )
    capacity_eps = statistics.median(rd.episodes / rd.server_s for rd in rep.rounds)

    with busy_loops(cfg.busy_cores) as busy:
        time.sleep(1.0)
        for li, frac in enumerate(cfg.rates):
            rate = frac * capacity_eps
            progress(f"lag: {rate:.2f} episodes/s ({frac:.0%} of {capacity_eps:.2f}) for {cfg.window_s:g} s")
            lv = lag_level(srv, NS, rate, cfg.window_s, cfg.steps, cfg.poll_interval_s, f"lag{li}", busy, 59 + li, enc)
            rep.levels.append(lv)
            progress(
                f"  token p50 {lv.token.p50_ms:.0f} ms p99 {lv.token.p99_ms:.0f}; poll p50 "
                f"{lv.poll.p50_ms:.0f} p99 {lv.poll.p99_ms:.0f}; jobs p50 {lv.jobs.p50_ms:.0f}; "
                f"pending at end {lv.pending_at_end}"
            )
        progress(f"awaited job vs a backlog of {cfg.other_backlog} episodes in another namespace")
        wait_drained(srv, 600)
        rep.backlog = backlog_run(
            srv, client, NS, OTHER_NS, cfg.other_backlog, cfg.steps, cfg.poll_interval_s, busy, 61
        )
        b = rep.backlog
        progress(
            f"  token {b.token_lag_s or float('nan'):.1f} s, poll {b.poll_lag_s or float('nan'):.1f} s, "
            f"backlog drained in {b.backlog_drain_s:.1f} s"
        )
    rep.rss_mb = server_rss_mb(srv)


# -- report ----------------------------------------------------------------------------------------------


def _f(x: float | None, digits: int = 0) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.{digits}f}"


def _s(ms: float) -> str:
    """Milliseconds as seconds, one decimal."""
    return _f(ms / 1000 if ms == ms else ms, 1)


def render_markdown(rep: Report) -> str:
    cfg, wk = rep.config, rep.worker
    env = server_env_overrides()
    callers = wk["concurrency"]
    lines = [
        *opening(
            "Freshness (ingest to searchable)",
            rep,
            "`--quick` is one round and one lag level, ~3 minutes; `--smoke` is seconds, for tests/bench",
        ),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in rep.versions.items()),
        f"- Machine load: 1-minute load average {rep.load_avg_start:.1f} at the start, {rep.load_avg_end:.1f} at "
        f"the end; other processes used {rep.quiet_before:.0f} % of a core just before the searchable rounds "
        f"(waited up to {cfg['quiet_wait_s']:g} s for quiet, then ran anyway); per phase below.",
        "- Server: `reflexa serve --host 127.0.0.1 --port P` with its defaults: SQLite at "
        "`<data_dir>/reflexa.db` (migrated on start), the in-process worker "
        f"({callers} slots on the fast lane, closed trajectories claimed {wk['batch_jobs']} at a time with one "
        f"encoder call, starved jobs first on the last slot after {wk['starved_after_s']:g} s), the ONNX "
        f"all-MiniLM-L6-v2 encoder ({wk['threads']} intra-op thread, batches of {wk['encode_batch']}, 100k-entry "
        "cache) shared by the API and the worker. Settings from the environment (inherited): "
        + (", ".join(f"`{k}={v}`" for k, v in env.items()) or "none")
        + f". Server RSS at the end: {rep.rss_mb:.0f} MB.",
        f"- Episodes: closed {cfg['steps']}-step trajectories of unique generated agent states "
        "(`bench/common/agent_states.py`: text-game rooms, grid views, web pages) with a thought per step; the "
        "observation and the thought carry the episode's tag, so every step is a new exemplar with two new "
        "texts to encode (state and internal state) and no vector is reused by text hash. One exemplar = one "
        "searchable item.",
        "",
        "### Searchable items/s against the encoder",
        "",
        f"Server = a backlog of {cfg['backlog']} episodes posted in one `POST …/trajectories/batch` -> a "
        "retrieve with that write's consistency token answered (so: ingest, queue, claim, read, encode, write, "
        "index sync). Jobs span = first job created -> last job finished, from the jobs table. Floor = in the "
        'benchmark process, the server\'s encoder (`build_embedder("onnx")`, same threads and batch size, no '
        "cache) on exactly the texts the worker encodes for those episodes (made by the server's "
        f"`state_text` / `internal_text`), one `encode` call per {wk['batch_jobs']} episodes as the worker "
        f"batches them, with {callers} callers at once (the worker's slots) and with 1. Interleaved: each "
        "round runs the three, the order rotating by round. CPU in % of one core (2 cores = 200 %); CPU "
        "ms/exemplar = the server process's CPU time (the floor: this process's) / exemplars; busiest server "
        "threads = CPU seconds of the server's three busiest threads during its part (both worker slots "
        "encoding at once show as two large numbers).",
        "",
        f"| round | exemplars (texts) | server s | server exemplars/s | jobs span s | floor {callers} callers "
        f"exemplars/s | floor 1 caller exemplars/s | server / floor {callers} | server / floor 1 | server CPU "
        f"| server CPU ms/exemplar | floor CPU ms/exemplar ({callers} / 1) | busiest server threads CPU s "
        "| other CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for i, rd in enumerate(rep.rounds):
        srv_r, par, ser = (
            rd.exemplars / rd.server_s,
            rd.exemplars / rd.floor_parallel_s,
            rd.exemplars / rd.floor_serial_s,
        )
        threads = " / ".join(f"{x:.1f}" for x in rd.busiest_threads_s)
        cpu_par, cpu_ser = 1000 * rd.floor_parallel_cpu_s / rd.exemplars, 1000 * rd.floor_serial_cpu_s / rd.exemplars
        lines.append(
            f"| {i + 1} | {rd.exemplars:,} ({rd.texts:,}) | {rd.server_s:.1f} | {srv_r:.0f} | {rd.jobs_span_s:.1f} "
            f"| {par:.0f} | {ser:.0f} | {srv_r / par:.0%} | {srv_r / ser:.0%} | {rd.server_cpu_pct:.0f} % "
            f"| {1000 * rd.server_cpu_s / rd.exemplars:.1f} "
            f"| {cpu_par:.1f} / {cpu_ser:.1f} "
            f"| {threads} | {rd.other_cpu_pct:.0f} % |"
        )
    tot = _totals(rep)
    if rep.rounds:
        lines.append(
            f"| all | {tot['exemplars']:,} ({tot['texts']:,}) | {tot['server_s']:.1f} | {tot['server']:.0f} "
            f"| {tot['span_s']:.1f} | {tot['parallel']:.0f} | {tot['serial']:.0f} "
            f"| **{tot['server'] / tot['parallel']:.0%}** | {tot['server'] / tot['serial']:.0%} | | | | | |"
        )
    busy = rep.levels[0].busy_cpu_pct if rep.levels else float("nan")
    lines += [
        "",
        f"### Lag under paced ingest, {cfg['busy_cores']} core busy",
        "",
        f"A busy loop (`python -c 'while True: pass'`, started and stopped by the benchmark) spins "
        f"{cfg['busy_cores']} of the 2 cores throughout. Closed {cfg['steps']}-step episodes posted at each "
        f"rate for {cfg['window_s']:g} s (rates are fractions of the searchable episodes/s above, measured "
        "without the busy loop), each by its own agent thread that then checks for it: every other episode "
        "with the `reflexa` client's read-your-writes (`create_trajectory`, then `retrieve` with the default "
        "`consistency=\"session\"`, which sends the write's token; the server's wait also moves the job to "
        "`Priority.AWAITED`), the others by polling a retrieve without a token every "
        f"{1000 * cfg['poll_interval_s']:.0f} ms until the episode's last state is in the answer. Lag = the "
        "write's acknowledgement -> the answer that has it. Jobs = every episode's `trajectory.closed` job, "
        "created -> finished (jobs table). Pending = jobs queued or running when the window closed; drain = "
        "from then until none. Other CPU = the machine minus server, benchmark process and busy loop.",
        "",
        "| rate asked /s | achieved /s | exemplars/s | episodes | token lag p50 s | p99 s | of which "
        "waited p50 s | poll lag p50 s | p99 s | job p50 s | p99 s | floor: one episode encoded p50 s "
        "| pending at end | drain s | server CPU | busy loop CPU | other CPU | not found / timeouts / errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for lv in rep.levels:
        lines.append(
            f"| {lv.asked_eps:.2f} | {lv.achieved_eps:.2f} | {lv.achieved_eps * cfg['steps']:.0f} | {lv.episodes} "
            f"| {_s(lv.token.p50_ms)} | {_s(lv.token.p99_ms)} | {_s(lv.token_waited.p50_ms)} "
            f"| {_s(lv.poll.p50_ms)} | {_s(lv.poll.p99_ms)} | {_s(lv.jobs.p50_ms)} | {_s(lv.jobs.p99_ms)} "
            f"| {_s(lv.encode_one.p50_ms) if lv.encode_one else '–'} | {lv.pending_at_end} | {lv.drain_s:.1f} "
            f"| {lv.server_cpu_pct:.0f} % | {lv.busy_cpu_pct:.0f} % "
            f"| {lv.other_cpu_pct:.0f} % | {lv.token_missing} / {lv.poll_timeouts} / {lv.errors} |"
        )
    lines += [
        "",
        "Samples per level: token and poll each get half the episodes (p99 of so few is their maximum). "
        "Floor = after the level (server idle, busy loop still on), one episode's texts through the server's "
        "encoder in this process, one call (3 episodes): the least a job can take.",
    ]
    b = rep.backlog
    if b is not None:
        lines += [
            "",
            "### An awaited job against another namespace's backlog",
            "",
            f"Still with the busy loop ({busy:.0f} % of a core): {b.backlog} closed {cfg['steps']}-step episodes "
            f"queued in namespace `{OTHER_NS}` in one batch request; right after, in the agent's namespace, one "
            "episode written and polled for (no token), then one written and retrieved with its token. Job "
            "created -> finished from the jobs table; backlog done first = backlog jobs finished before that "
            f"job. Server CPU {b.server_cpu_pct:.0f} %, other CPU {b.other_cpu_pct:.0f} %.",
            "",
            "| episode | write ack -> searchable s | job created -> finished s | backlog jobs done first | job "
            "priority at the end |",
            "|---|---:|---:|---:|---:|",
            f"| read-your-writes (token) | {_f(b.token_lag_s, 1)}{'' if b.token_ok else ' (not found)'} "
            f"| {_f(b.token_job_s, 1)} | {b.backlog_done_before_token} of {b.backlog} | {_f(b.token_priority)} |",
            f"| polled (no token) | {_f(b.poll_lag_s, 1)}{'' if b.poll_ok else ' (not found)'} "
            f"| {_f(b.poll_job_s, 1)} | {b.backlog_done_before_poll} of {b.backlog} | |",
            f"| the other namespace's backlog (all of it) | | {b.backlog_drain_s:.1f} | | |",
            "",
            f"The awaited job ran in a batch of {b.token_batch} jobs on its slot, {b.token_batch_other_ns} of them "
            f"from `{OTHER_NS}`'s backlog (the batch fill takes the next `trajectory.closed` jobs by priority, "
            "then age, of any namespace); that slot finished its previous batch "
            + (f"{b.token_claimed_after_s:.1f} s" if b.token_claimed_after_s is not None else "–")
            + " after the awaited job was queued (slots = `locked_by`; a batch = one slot's jobs finishing "
            "within 1.5 s of each other).",
        ]
    lines += ["", "### Against the aims", "", *verdicts(rep)]
    return "\n".join(lines) + "\n"


def _totals(rep: Report) -> dict[str, float]:
    if not rep.rounds:
        return {}
    ex = sum(r.exemplars for r in rep.rounds)
    t = {
        "exemplars": ex,
        "texts": sum(r.texts for r in rep.rounds),
        "server_s": sum(r.server_s for r in rep.rounds),
        "span_s": sum(r.jobs_span_s for r in rep.rounds),
    }
    t["server"] = ex / t["server_s"]
    t["parallel"] = ex / sum(r.floor_parallel_s for r in rep.rounds)
    t["serial"] = ex / sum(r.floor_serial_s for r in rep.rounds)
    return t


def verdicts(rep: Report) -> list[str]:
    out = []
    tot = _totals(rep)
    if tot:
        ratio = tot["server"] / tot["parallel"]
        ok = ratio >= AIM_SEARCHABLE_VS_ENCODER
        out.append(
            f"- Searchable items/s >= {AIM_SEARCHABLE_VS_ENCODER:.0%} of the encoder's own rate on the same texts: "
            f"{'**met**' if ok else '**not met**'} ({tot['server']:.0f} vs {tot['parallel']:.0f} exemplars/s "
            f"with {rep.worker['concurrency']} callers = {ratio:.0%}; against one caller {tot['serial']:.0f}/s = "
            f"{tot['server'] / tot['serial']:.0%})."
        )
    for lv in rep.levels:
        out.append(
            f"- Lag at {lv.achieved_eps:.2f} episodes/s ({lv.achieved_eps * rep.config['steps']:.0f} exemplars/s) "
            f"with a busy core: read-your-writes p50 {_s(lv.token.p50_ms)} s / p99 {_s(lv.token.p99_ms)} s, "
            f"polling p50 {_s(lv.poll.p50_ms)} s / p99 {_s(lv.poll.p99_ms)} s"
            + (
                f"; **not sustained** ({lv.pending_at_end} jobs pending when the window closed)"
                if lv.pending_at_end > 2
                else ""
            )
            + "."
        )
    b = rep.backlog
    if b is not None and b.token_lag_s is not None and b.poll_lag_s is not None:
        first = b.token_lag_s < b.poll_lag_s
        out.append(
            f"- Awaited job ahead of another namespace's backlog: {'**met**' if first else '**not met**'} "
            f"(read-your-writes answered in {b.token_lag_s:.1f} s after {b.backlog_done_before_token} of "
            f"{b.backlog} backlog jobs; the polled episode of the same namespace, written just before it, was "
            f"searchable after {b.poll_lag_s:.1f} s, the backlog drained in {b.backlog_drain_s:.1f} s)."
        )
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("freshness", __doc__, SECTION, SIZES, out="The markdown is always printed.")
    args = parser.parse_args(argv)
    rep = run(SIZES.pick(args), reproduce_command(parser, args), args.quick or args.smoke)
    progress(f"done in {rep.wall_s / 60:.1f} min")
    write_outputs(args.out, SECTION, asdict(rep), render_markdown(rep), _json_default)
    print(render_markdown(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
