"""Batch retrieve throughput: states/s through `POST …/retrieve/batch` against the
same kind of states sent as single `POST …/retrieve` calls (one client, and several
concurrent ones) and against the in-process floor (one batched ONNX encode of the
same texts + one faiss search of the server's own index), interleaved by round.

Every HTTP mode of every round sends its own slice of held-out query states that no
request has sent before (the server's embedding cache misses); the floor, which has
no cache, encodes the texts the first batch mode of its round sent. The order of the
modes rotates from round to round, so a burst of background load does not always
land on the same mode.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.common.api import headers
from bench.common.cpu import CpuSample, CpuUse
from bench.retrieval.config import Config, K
from bench.retrieval.server import Server, retrieve_body


@dataclass
class BatchRow:
    mode: str  # "batch of 32", "single, 1 client", "single, 4 clients", "floor"
    states: int = 0
    seconds: float = 0.0
    errors: int = 0
    server_cpu_s: float = 0.0
    other_cpu_s: float = 0.0  # CPU the rest of the machine used during this mode's runs (core-seconds)
    per_round: list[float] = field(default_factory=list)  # states/s of each round

    @property
    def per_s(self) -> float:
        return self.states / self.seconds if self.seconds else float("nan")

    @property
    def server_ms_per_state(self) -> float:
        return 1000 * self.server_cpu_s / self.states if self.states else float("nan")

    @property
    def other_pct(self) -> float:
        return 100 * self.other_cpu_s / self.seconds if self.seconds else float("nan")


@dataclass
class BatchResult:
    rounds: int
    states_per_round: int
    rows: list[BatchRow]
    floor_encode_s: float
    floor_search_s: float

    def row(self, mode: str) -> BatchRow:
        return next(r for r in self.rows if r.mode == mode)

    @property
    def floor(self) -> BatchRow:
        return self.row("floor")


def batch_mode(size: int) -> str:
    return f"batch of {size}"


def single_mode(clients: int) -> str:
    return f"single, {clients} client{'s' if clients != 1 else ''}"


def _post_batches(client: httpx.Client, ns: str, texts: list[str], size: int) -> int:
    errors = 0
    path = f"/v1/namespaces/{ns}/retrieve/batch"
    for start in range(0, len(texts), size):
        chunk = texts[start : start + size]
        body = orjson.dumps({"requests": [{"state": {"observation": t}, "k": K} for t in chunk]})
        r = client.post(path, content=body)
        if r.status_code != 200 or len(r.json()["results"]) != len(chunk):
            errors += 1
    return errors


def _post_singles(srv: Server, key: str, client: httpx.Client, ns: str, texts: list[str], clients: int) -> int:
    path = f"/v1/namespaces/{ns}/retrieve"
    bodies = [retrieve_body(t) for t in texts]
    if clients == 1:
        return sum(client.post(path, content=b).status_code != 200 for b in bodies)
    counter = itertools.count()
    errs = [0] * clients

    def run(i: int) -> None:
        with httpx.Client(base_url=srv.url, headers=headers(key), timeout=120) as c:
            c.get("/healthz")  # connect before the clock matters
            while (j := next(counter)) < len(bodies):
                try:
                    errs[i] += c.post(path, content=bodies[j]).status_code != 200
                except httpx.HTTPError:
                    errs[i] += 1

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(errs)


def run_batch(
    srv: Server, key: str, client: httpx.Client, ns: str, cfg: Config, texts: list[str], index: Any, enc: Any
) -> BatchResult:
    """`cfg.batch_rounds` rounds of every mode on `cfg.batch_states` states each;
    `texts` must hold a fresh slice per HTTP mode and round."""
    n = cfg.batch_states
    modes = [batch_mode(b) for b in cfg.batch_sizes] + [single_mode(1), single_mode(cfg.clients)] + ["floor"]
    rows = {m: BatchRow(m) for m in modes}
    http_modes = len(modes) - 1
    need = http_modes * n * cfg.batch_rounds
    if len(texts) < need:
        raise ValueError(f"batch throughput needs {need} fresh query texts, the pool has {len(texts)}")
    slices = iter(texts[i : i + n] for i in range(0, need, n))
    # Warm-up, untimed: batch-sized shapes through the server's and the floor's encoder.
    warm = texts[need : need + max(cfg.batch_sizes)]
    if warm:
        _post_batches(client, ns, warm, max(cfg.batch_sizes))
        index.search(enc.encode(warm), K)
    cores = os.cpu_count() or 1
    enc_s = search_s = 0.0
    for r in range(cfg.batch_rounds):
        todo = {m: next(slices) for m in modes[:-1]}
        todo["floor"] = todo[modes[0]]  # the floor encodes what the first batch mode sent (it has no cache)
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        for mode in order:
            chunk = todo[mode]
            before = CpuSample.take(srv.pid, None)
            t0 = time.perf_counter()
            if mode == "floor":
                vectors = enc.encode(chunk)  # one batched call (the server's batch size inside)
                t1 = time.perf_counter()
                index.search(vectors, K)
                t2 = time.perf_counter()
                enc_s, search_s = enc_s + t1 - t0, search_s + t2 - t1
                errors = 0
            elif mode.startswith("batch"):
                errors = _post_batches(client, ns, chunk, int(mode.rsplit(" ", 1)[1]))
            else:
                errors = _post_singles(srv, key, client, ns, chunk, int(mode.split(", ")[1].split()[0]))
            elapsed = time.perf_counter() - t0
            after = CpuSample.take(srv.pid, None)
            use = CpuUse.between(before, after, cores)
            row = rows[mode]
            row.states += len(chunk)
            row.seconds += elapsed
            row.errors += errors
            row.server_cpu_s += use.server_cpu_s
            row.other_cpu_s += use.other_pct / 100 * elapsed
            row.per_round.append(len(chunk) / elapsed)
    return BatchResult(cfg.batch_rounds, n, list(rows.values()), enc_s, search_s)
