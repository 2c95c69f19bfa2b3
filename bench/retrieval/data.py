"""bench.retrieval's data: agent states, their real vectors (encoded once, cached
under bench/results/retrieval/), synthetic items past them, exact ground truth."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bench.common.agent_states import VERSION as CORPUS_VERSION
from bench.common.agent_states import AgentState, corpus_states, fingerprint, query_states
from bench.common.output import progress
from bench.common.processes import embedder
from bench.retrieval.config import CHUNK, CMP, MAX_UNIQUE, N_QUERIES, QUERY_SOURCE, RESULTS, Config, K


@functools.cache
def _bulk_embedder() -> Any:
    return embedder(threads=os.cpu_count() or 1)


def _encode_cached(texts: list[str], path: Path) -> np.ndarray:
    """The vectors of `texts`, from `path` if it holds these or more (the texts are a
    prefix of the chunk's, as a smaller `--unique` asks: the first rows answer), else
    encoded and saved there."""
    if path.exists():
        vectors = np.load(path)
        if vectors.shape[1:] == (384,) and len(vectors) >= len(texts):
            return np.ascontiguousarray(vectors[: len(texts)])
    started = time.perf_counter()
    vectors = np.ascontiguousarray(_bulk_embedder().encode(texts), dtype=np.float32)
    progress(f"  encoded {len(texts):,} texts in {time.perf_counter() - started:.0f} s -> {path.name}")
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
    chunks = []
    for c in range(math.ceil(cfg.unique / CHUNK)):
        path = RESULTS / f"{CORPUS_VERSION}-{key}-corpus{c}.npy"
        chunks.append(_encode_cached([s.observation for s in states[c * CHUNK : (c + 1) * CHUNK]], path))
    qpath = RESULTS / f"{CORPUS_VERSION}-{key}-queries.npy"
    qvecs = _encode_cached([q.observation for q in queries[: CMP[1]]], qpath)
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
