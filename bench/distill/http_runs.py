"""What bench.distill measures through HTTP on the real server: taking a snapshot,
`POST …/distill/contexts` for a rollout batch, and `GET …/export` streamed, with the
server process's memory sampled while an export streams."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common.api import NAMESPACE
from bench.common.cpu import CpuSample, CpuUse
from bench.common.processes import proc_memory_mb

TEACHERS: list[dict[str, Any]] = [{"kind": "memory"}, {"kind": "hindsight", "horizon": 2}, {"kind": "attempt_summary"}]
DATASETS = ("trajectories", "sft", "preferences", "attempts")
FORMATS = ("jsonl", "parquet")


@dataclass(frozen=True)
class Target:
    """The server: where it listens, whose CPU and memory to read."""

    pid: int
    pg_database: str | None


# -- snapshot --------------------------------------------------------------------------------


@dataclass
class SnapshotRun:
    id: str
    seconds: float
    reflections: int
    trajectories: int
    steps: int
    copied: dict[str, int] = field(default_factory=dict)  # table -> rows copied (from the database)


def take_snapshot(client: httpx.Client, snapshot_id: str) -> SnapshotRun:
    t0 = time.perf_counter()
    r = client.post(f"/v1/namespaces/{NAMESPACE}/snapshots", json={"id": snapshot_id})
    seconds = time.perf_counter() - t0
    r.raise_for_status()
    body = r.json()
    return SnapshotRun(snapshot_id, seconds, body["reflection_count"], body["trajectory_count"], body["step_count"])


# -- teacher contexts ------------------------------------------------------------------------


@dataclass
class ContextsRun:
    label: str
    trajectories: int
    steps: int
    seconds: float  # request sent -> whole response received
    response_bytes: int
    server_cpu_s: float
    cpu: CpuUse
    applicable: dict[str, int]  # teacher key -> steps where it applied
    memory_items: int  # items shown by the memory teacher, all steps

    @property
    def contexts(self) -> int:
        return self.steps * (1 + len(TEACHERS))

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def contexts_per_s(self) -> float:
        return self.contexts / self.seconds


def contexts_body(snapshot_id: str, ids: list[str], include: list[str] | None = None) -> bytes:
    body = {"snapshot": snapshot_id, "trajectories": [{"id": i} for i in ids], "teachers": TEACHERS}
    return orjson.dumps(body if include is None else {**body, "include": include})


def post_contexts(
    client: httpx.Client, target: Target, label: str, snapshot_id: str, ids: list[str], include: list[str] | None = None
) -> ContextsRun:
    """One request; `include` None: the server's default (text and messages)."""
    body = contexts_body(snapshot_id, ids, include)
    cores = os.cpu_count() or 1
    before = CpuSample.take(target.pid, target.pg_database)
    t0 = time.perf_counter()
    r = client.post(f"/v1/namespaces/{NAMESPACE}/distill/contexts", content=body)
    content = r.content
    seconds = time.perf_counter() - t0
    after = CpuSample.take(target.pid, target.pg_database)
    if r.status_code != 200:
        raise RuntimeError(f"POST …/distill/contexts answered {r.status_code}: {r.text[:2000]}")
    answer = orjson.loads(content)
    applicable: Counter[str] = Counter()
    steps = items = 0
    for t in answer["trajectories"]:
        for s in t["steps"]:
            steps += 1
            for key, teacher in s["teachers"].items():
                applicable[key] += bool(teacher["applicable"])
                if key == "memory":
                    items += len(teacher["item_ids"])
    use = CpuUse.between(before, after, cores)
    return ContextsRun(label, len(ids), steps, seconds, len(content), use.server_cpu_s, use, dict(applicable), items)


# -- export ------------------------------------------------------------------------------------


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (proc(5) clear_refs "5")."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class RssSampler:
    """VmRSS of a process every `interval` seconds in a thread, while in the block."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.pid, self.interval = pid, interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, _ = proc_memory_mb(self.pid)
            self.peak_mb = max(self.peak_mb, rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class ExportRun:
    dataset: str
    format: str
    rows: int
    bytes: int
    seconds: float  # request sent -> last byte received
    first_byte_s: float
    rss_before_mb: float
    rss_peak_mb: float  # the higher of the sampled VmRSS and VmHWM (reset just before)
    server_cpu_s: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else float("nan")

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds else float("nan")


def stream_export(client: httpx.Client, target: Target, dataset: str, fmt: str, snapshot_id: str) -> ExportRun:
    """One export through httpx's stream, bytes counted as they come (kept for parquet,
    whose rows are counted from the file's footer afterwards)."""
    params = {"dataset": dataset, "format": fmt, "snapshot": snapshot_id}
    rss_before, _ = proc_memory_mb(target.pid)
    hwm = reset_peak_rss(target.pid)
    size = lines = 0
    kept: list[bytes] = []
    first = float("nan")
    cpu0 = CpuSample.take(target.pid, None).server
    with RssSampler(target.pid) as rss:
        t0 = time.perf_counter()
        with client.stream("GET", f"/v1/namespaces/{NAMESPACE}/export", params=params) as r:
            if r.status_code != 200:
                r.read()
                raise RuntimeError(f"GET …/export {params} answered {r.status_code}: {r.text[:2000]}")
            for chunk in r.iter_raw():
                if not size:
                    first = time.perf_counter() - t0
                size += len(chunk)
                if fmt == "jsonl":
                    lines += chunk.count(b"\n")
                else:
                    kept.append(chunk)
        seconds = time.perf_counter() - t0
    peak = rss.peak_mb
    if hwm:
        peak = max(peak, proc_memory_mb(target.pid)[1])
    cpu = CpuSample.take(target.pid, None).server - cpu0
    rows = lines
    if fmt == "parquet":
        with contextlib.suppress(pa.ArrowInvalid):
            rows = pq.read_metadata(pa.BufferReader(b"".join(kept))).num_rows
    return ExportRun(dataset, fmt, rows, size, seconds, first, rss_before, peak, cpu)
