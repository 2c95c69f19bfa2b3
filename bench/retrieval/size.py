"""One size of bench.retrieval: populate, build the index, restart on its snapshot,
measure HTTP against the floor, recall."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common.api import headers
from bench.common.cpu import wait_for_quiet
from bench.common.databases import Databases
from bench.common.latency import Latency
from bench.common.output import progress
from bench.common.processes import proc_memory_mb
from bench.retrieval.batch import BatchResult, run_batch
from bench.retrieval.config import BATCH_POOL, BENCH_NS, CMP, CMP_NS, POOL, PROFILE_POOL, SEQ, WARM, Config
from bench.retrieval.data import Data, dataset, exact_top, recall
from bench.retrieval.floor import Floor, FloorRun, load_snapshot
from bench.retrieval.load import LoadResult, concurrent, sequential
from bench.retrieval.populate import populate
from bench.retrieval.profile import profiled
from bench.retrieval.server import retrieve_body, serve
from migrations import upgrade


@dataclass
class SizeResult:
    n: int
    real: int
    noisy: int
    populate_s: float
    populate_rows_per_s: float
    server_start_s: float
    first_answer_s: float  # index build from the embeddings table + the first query
    ann_ready_s: float  # from the first answer until the background ANN build landed (0: none)
    restart_answer_s: float  # after a restart: snapshot load + catch-up + the first query
    index_kind: str
    rss_after_build_mb: float
    rss_end_mb: float
    peak_rss_mb: float
    snapshot_stop_s: float
    miss: Latency
    hit: Latency
    miss_cache: tuple[int, int]
    hit_cache: tuple[int, int]
    errors: int
    recall_http: float
    recall_raw_index: float
    floor: Floor
    load: list[LoadResult]
    other_cpu_pct: float
    cmp: dict[str, Any] | None = None
    batch: BatchResult | None = None
    profile: dict[str, str] | None = None  # path -> markdown table (with --profile)


def wait_for_rebuilds(client: httpx.Client, timeout_s: float = 3600) -> float:
    """Seconds until the server's /metrics shows no index rebuilding in the background."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        busy = [
            line
            for line in client.get("/metrics").text.splitlines()
            if line.startswith("reflexa_index_rebuilding{") and not line.endswith(" 0.0")
        ]
        if not busy:
            return time.perf_counter() - t0
        time.sleep(0.5)
    raise TimeoutError(f"index still rebuilding after {timeout_s:.0f} s")


def run_size(
    cfg: Config,
    n: int,
    data: Data,
    dbs: Databases,
    work: Path,
    floor_enc: Any,
    model: str,
    backend: str,
    profile_dir: Path | None = None,
) -> SizeResult:
    progress(f"N={n:,}")
    vectors = dataset(data.vectors, n, cfg.sigma)
    url = dbs.url(backend, f"size-{n}")
    upgrade(url)
    pop = populate(url, BENCH_NS, data.states, vectors, model)
    rows = 4 * pop.items  # reflections, embeddings, evidence and feed rows
    progress(f"  populated {n:,} items in {pop.seconds:.0f} s")
    cmp_pop = None
    if cfg.mem0_items and n == min(cfg.sizes):
        cmp_pop = populate(url, CMP_NS, data.states, data.vectors[: cfg.mem0_items], model)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    seq_texts = [q.observation for q in data.queries[SEQ[0] : SEQ[0] + cfg.seq_queries]]
    warm_texts = [q.observation for q in data.queries[WARM[0] : WARM[0] + cfg.warmup + 1]]
    pool_texts = [q.observation for q in data.queries[POOL[0] : POOL[1]]]
    batch_texts = [q.observation for q in data.queries[BATCH_POOL[0] : BATCH_POOL[1]]]
    data_dir = work / f"data-{n}"
    retrieve_path = f"/v1/namespaces/{BENCH_NS}/retrieve"
    # Phase 1: a fresh start builds the index from the embeddings table on the first
    # retrieve; stopping saves it as a snapshot, which the floor then loads.
    with (
        serve(url, key, data_dir, worker=False) as srv,
        httpx.Client(base_url=srv.url, headers=headers(key), timeout=3600) as client,
    ):
        t0 = time.perf_counter()
        r = client.post(retrieve_path, content=retrieve_body(warm_texts[0]))
        first_answer = time.perf_counter() - t0
        r.raise_for_status()
        # Past exact_max the first answer comes from exact search while the ANN
        # structure is built in the background: wait for it, so the snapshot has it.
        ann_ready = wait_for_rebuilds(client)
        rss_build, peak_build = proc_memory_mb(srv.pid)
        progress(
            f"  server up in {srv.start_s:.1f} s; first answer (index build) {first_answer:.1f} s, "
            f"background ANN build {ann_ready:.1f} s more, RSS {rss_build:.0f} MB (peak {peak_build:.0f})"
        )
    build_srv = srv
    progress(f"  stopped (snapshot saved) in {build_srv.stop_s:.1f} s")
    index, kind = load_snapshot(data_dir, BENCH_NS)
    floor_run = FloorRun(index, floor_enc, seq_texts, pop.first_pk)
    # Phase 2: restart (the snapshot loads), then measure, the floor interleaved.
    with (
        serve(url, key, data_dir, worker=False) as srv,
        httpx.Client(base_url=srv.url, headers=headers(key), timeout=3600) as client,
    ):
        t0 = time.perf_counter()
        client.post(retrieve_path, content=retrieve_body(warm_texts[1])).raise_for_status()
        restart_answer = time.perf_counter() - t0
        for t in warm_texts[2:]:
            client.post(retrieve_path, content=retrieve_body(t)).raise_for_status()
        floor_run.warm_up(warm_texts[2:])
        other = wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
        miss = sequential(client, BENCH_NS, seq_texts, between=floor_run)
        hit = sequential(client, BENCH_NS, seq_texts)
        progress(
            f"  sequential: miss p50 {miss.latency.p50_ms:.1f} ms p99 {miss.latency.p99_ms:.1f}; "
            f"hit p50 {hit.latency.p50_ms:.1f} ms"
        )
        window, clients = cfg.window_s, cfg.clients
        loads = [
            concurrent(srv, key, BENCH_NS, pool_texts, clients=clients, window_s=window, cycle=False, label="miss"),
            concurrent(srv, key, BENCH_NS, seq_texts, clients=clients, window_s=window, cycle=True, label="hit"),
        ]
        for lr in loads:
            progress(
                f"  {lr.clients} clients, {lr.path}: {lr.per_s:.0f} req/s, p50 {lr.latency.p50_ms:.1f} ms, "
                f"p99 {lr.latency.p99_ms:.1f} ms"
            )
        wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
        batch = run_batch(srv, key, client, BENCH_NS, cfg, batch_texts, index, floor_enc)
        progress(
            "  states/s: "
            + ", ".join(f"{row.mode} {row.per_s:.0f}" for row in batch.rows)
            + f" (errors {sum(row.errors for row in batch.rows)})"
        )
        cmp = None
        if cmp_pop is not None:
            cmp = measure_cmp(client, cfg, data)
        rss_end, _ = proc_memory_mb(srv.pid)
        profile: dict[str, str] | None = None
        if profile_dir is not None:  # after the measured runs: sampling perturbs latency
            fresh = [q.observation for q in data.queries[PROFILE_POOL[0] : PROFILE_POOL[0] + cfg.seq_queries]]
            profile = {
                "miss": profiled(srv, client, BENCH_NS, fresh, profile_dir / f"retrieve-{n}-miss.txt"),
                "hit": profiled(srv, client, BENCH_NS, seq_texts, profile_dir / f"retrieve-{n}-hit.txt"),
            }
    floor = floor_run.result()
    del floor_run, index
    truth = exact_top(vectors, data.query_vectors[SEQ[0] : SEQ[0] + cfg.seq_queries])
    result = SizeResult(
        n=n,
        real=min(n, len(data.vectors)),
        noisy=max(0, n - len(data.vectors)),
        populate_s=pop.seconds,
        populate_rows_per_s=rows / pop.seconds,
        server_start_s=build_srv.start_s,
        first_answer_s=first_answer,
        ann_ready_s=ann_ready,
        restart_answer_s=restart_answer,
        index_kind=kind,
        rss_after_build_mb=rss_build,
        rss_end_mb=rss_end,
        peak_rss_mb=peak_build,
        snapshot_stop_s=build_srv.stop_s,
        miss=miss.latency,
        hit=hit.latency,
        miss_cache=(miss.cache_hits, miss.cache_misses),
        hit_cache=(hit.cache_hits, hit.cache_misses),
        errors=miss.errors + hit.errors + sum(lr.errors for lr in loads),
        recall_http=recall(miss.found, truth),
        recall_raw_index=recall(floor.found, truth),
        floor=floor,
        load=loads,
        other_cpu_pct=other,
        cmp=cmp,
        batch=batch,
        profile=profile,
    )
    progress(
        f"  floor p50 {floor.total.p50_ms:.1f} ms (encode {floor.encode.p50_ms:.1f}, "
        f"search {floor.search.p50_ms:.2f}); "
        f"recall@10 HTTP {result.recall_http:.3f}, raw index {result.recall_raw_index:.3f} ({kind})"
    )
    return result


def measure_cmp(client: httpx.Client, cfg: Config, data: Data) -> dict[str, Any]:
    """Reflexa on mem0's items (the first mem0_items real states) and queries."""
    texts = [q.observation for q in data.queries[CMP[0] : CMP[0] + cfg.mem0_queries]]
    client.post(f"/v1/namespaces/{CMP_NS}/retrieve", content=retrieve_body(data.queries[WARM[1] - 1].observation))
    miss = sequential(client, CMP_NS, texts)
    hit = sequential(client, CMP_NS, texts)
    truth = exact_top(data.vectors[: cfg.mem0_items], data.query_vectors[CMP[0] : CMP[0] + cfg.mem0_queries])
    return {"miss": miss.latency, "hit": hit.latency, "recall": recall(miss.found, truth), "errors": miss.errors}
