"""The raw floor of a retrieve: the same encode and a search of the server's own
index (its saved snapshot), in this process."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common.latency import Latency
from bench.retrieval.config import K


@dataclass
class Floor:
    encode: Latency
    search: Latency
    total: Latency
    found: list[list[int]]


class FloorRun:
    """The raw floor in this process: encode (the server's ONNX encoder on its thread
    settings, bench.common.processes.server_embedder; no cache) + search of the
    server's own index (its saved snapshot), top-10, one query at a time between the
    HTTP requests, when the server is idle: an encode that finds the machine idle
    takes `embedding.idle_threads` in both."""

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
