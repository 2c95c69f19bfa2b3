"""Ingest to searchable, with the in-process worker on: how fast a backlog becomes
searchable, and the lag a probe sees under a steady background load."""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common.agent_states import unique_state
from bench.common.api import headers, wait_token
from bench.common.cpu import CpuSample, CpuUse, wait_for_quiet
from bench.common.databases import Databases
from bench.common.latency import Latency
from bench.common.output import progress
from bench.common.processes import proc_memory_mb
from bench.retrieval.config import LAG_NS, Config, K
from bench.retrieval.server import retrieve_body, serve
from migrations import upgrade


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


def run_lag(cfg: Config, dbs: Databases, work: Path, backend: str) -> LagResult:
    progress("ingest-to-searchable (worker on)")
    url = dbs.url(backend, "lag")
    upgrade(url)
    key = "rfx_bench_" + secrets.token_urlsafe(24)
    rng = random.Random(41)
    steps = cfg.steps_per_trajectory
    with (
        serve(url, key, work / "data-lag", worker=True) as srv,
        httpx.Client(base_url=srv.url, headers=headers(key), timeout=120) as client,
    ):
        client.post("/v1/namespaces", json={"name": LAG_NS}).raise_for_status()
        prefix = f"/v1/namespaces/{LAG_NS}/trajectories"
        # Warm-up: the first job loads nothing new, but the first retrieve builds an empty index.
        w = client.post(prefix, content=orjson.dumps(_trajectory("warm", rng, steps)))
        w.raise_for_status()
        wait_token(client, LAG_NS, w.json()["consistency_token"], "warm-up", K, 120).raise_for_status()

        # 1. Searchable throughput: a backlog of closed trajectories posted at once.
        wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
        batch = {"trajectories": [_trajectory(f"backlog-{i}", rng, steps) for i in range(cfg.lag_backlog)]}
        body = orjson.dumps(batch)
        t0 = time.perf_counter()
        r = client.post(prefix + "/batch", content=body)
        r.raise_for_status()
        done = wait_token(client, LAG_NS, r.json()["consistency_token"], "backlog", K, 900)
        capacity_s = time.perf_counter() - t0
        done.raise_for_status()
        items = cfg.lag_backlog * steps
        capacity = items / capacity_s
        progress(f"  backlog of {items} items searchable in {capacity_s:.1f} s: {capacity:.0f} items/s")

        # 2. Lag under a steady load at half that rate.
        traj_rate = max(0.2, capacity / steps / 2)
        stop = threading.Event()
        posted: list[tuple[float, str]] = []
        load_errors = [0]

        def loader() -> None:
            lrng = random.Random(43)
            with httpx.Client(base_url=srv.url, headers=headers(key), timeout=120) as lc:
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
            wait_token(client, LAG_NS, posted[-1][1], "drain", K, 900).raise_for_status()
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
