"""HTTP retrieve latency: sequential requests on one connection (with the floor
interleaved) and concurrent clients for a window."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench.common.api import headers
from bench.common.cpu import CpuSample, CpuUse
from bench.common.latency import Latency
from bench.retrieval.server import Server, cache_counts, item_index, retrieve_body


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
        with httpx.Client(base_url=srv.url, headers=headers(key), timeout=120) as client:
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
