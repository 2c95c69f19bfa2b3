"""VectorIndex: the id-keyed, thread-safe, persistent vector index one API process
keeps per (namespace, kind, field). The structure behind it (exact, IVF or HNSW) is
an implementation detail chosen by size; see the package docstring for why the
defaults are what they are.

Concurrency: searches take a shared lock and run in parallel (faiss releases the
GIL); a mutation takes the exclusive lock only for as long as it touches the
structure. Writers are serialised by a separate mutex, so a long rebuild (the switch
from exact to ANN, compacting HNSW tombstones, retraining an outgrown IVF) is built
from a snapshot without any lock that searches need and swapped in at the end:
searches keep being served by the old structure, other writers wait. Large batches
are applied in chunks, so a bulk add never blocks searches for more than one chunk.
With `rebuild_in_background` (what the API's indexes use) writers do not wait either:
the new structure is built on a thread from a snapshot while writes keep going to the
old one and are logged; the log is replayed onto the new structure before the swap.
A 1M-vector IVF training takes minutes, and no request should wait on it.

Threads: faiss parallelises with OpenMP, whose thread count is a per-OS-thread
setting (a thread the caller's pool created starts with "all cores", whatever the
main thread set). Two pool threads searching at once on 2 cores then run four
spinning OpenMP workers and were measured 6x slower than the same searches done one
after the other. So every call sets the count for its own thread: search_threads
(1: the API already runs one query per request thread) for searches, build_threads
(all usable cores by default) for writes and rebuilds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import faiss
import numpy as np

from store.vectors import fileformat
from store.vectors.backend import Backend, BackendState
from store.vectors.exact import ExactBackend
from store.vectors.fileformat import CorruptIndexError
from store.vectors.hnsw import HNSWBackend
from store.vectors.ivf import IVFBackend
from store.vectors.rwlock import ReadWriteLock

log = logging.getLogger("reflexa.index")

AnnKind = Literal["ivf", "hnsw"]
FORMAT_VERSION = 1
# Upserts applied under one exclusive lock hold; bounds how long a bulk add (HNSW
# inserts cost ~0.3 ms each on 2 cores) can make concurrent searches wait.
WRITE_CHUNK = 1024


@dataclass(frozen=True)
class IndexConfig:
    """Construction parameters; persisted with the index so load() restores the
    same behaviour."""

    dim: int
    exact_max: int
    ann: AnnKind
    hnsw_m: int
    ef_construction: int
    ef_search: int
    nlist: int | None
    nprobe: int
    max_tombstone_ratio: float
    search_threads: int
    build_threads: int | None

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"dim must be >= 1, got {self.dim}")
        if self.exact_max < 0:
            raise ValueError(f"exact_max must be >= 0, got {self.exact_max}")
        if self.ann not in get_args(AnnKind):
            raise ValueError(f"ann must be one of {get_args(AnnKind)}, got {self.ann!r}")
        for name in ("ef_construction", "ef_search", "nprobe", "search_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hnsw_m < 2:
            raise ValueError(f"hnsw_m must be >= 2, got {self.hnsw_m}")
        if self.nlist is not None and self.nlist < 1:
            raise ValueError(f"nlist must be >= 1 or None (automatic), got {self.nlist}")
        if self.build_threads is not None and self.build_threads < 1:
            raise ValueError(f"build_threads must be >= 1 or None (all cores), got {self.build_threads}")
        if not 0.0 < self.max_tombstone_ratio < 1.0:
            raise ValueError(f"max_tombstone_ratio must be in (0, 1), got {self.max_tombstone_ratio}")


@dataclass(frozen=True)
class IndexStats:
    """kind: structure serving searches; size: live vectors; rebuilds: structure
    switches and rebuilds since construction or load; tombstones: removed vectors
    an HNSW graph still holds; lists / imbalance: IVF inverted lists and their
    imbalance factor (1.0 = equal lengths; query cost grows with it)."""

    kind: str
    size: int
    rebuilds: int
    tombstones: int
    lists: int
    imbalance: float


class VectorIndex:
    """Inner-product (cosine, for L2-normalised vectors) top-k search over vectors
    keyed by int64 ids (>= 0; -1 is the padding id of results).

    Exact while it holds at most `exact_max` vectors; past that it is rebuilt as an
    `ann` index ("hnsw" or "ivf"), and back to exact if it shrinks below half of
    `exact_max`. `add` is an upsert: an id already present is replaced, never
    duplicated.
    """

    def __init__(
        self,
        dim: int,
        *,
        exact_max: int = 50_000,
        ann: AnnKind = "ivf",
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 128,
        nlist: int | None = None,
        nprobe: int = 32,
        max_tombstone_ratio: float = 0.2,
        search_threads: int = 1,
        build_threads: int | None = None,
        rebuild_in_background: bool = False,
    ) -> None:
        """hnsw_m / ef_construction: graph degree and build beam (memory and build
        time against recall); ef_search: search beam. nlist: IVF lists (None: about
        4*sqrt(N) at build time); nprobe: lists scanned per query.
        max_tombstone_ratio: share of removed-but-still-in-the-graph HNSW nodes that
        triggers a rebuild. search_threads / build_threads: faiss (OpenMP) threads
        per search call and per write (None: all usable cores).
        rebuild_in_background: switches and rebuilds run on their own thread
        instead of inside the write that triggered them (not persisted: a
        property of the process using the index)."""
        self._config = IndexConfig(
            dim,
            exact_max,
            ann,
            hnsw_m,
            ef_construction,
            ef_search,
            nlist,
            nprobe,
            max_tombstone_ratio,
            search_threads,
            build_threads,
        )
        self._backend: Backend = ExactBackend(dim)
        self._rw = ReadWriteLock()
        self._writer = threading.Lock()
        self._rebuilds = 0
        self._background = rebuild_in_background
        # While a background rebuild runs: the writes made since its snapshot, in
        # order, as ("add", ids, vectors) or ("remove", ids, None). Guarded by _writer.
        self._pending: list[tuple[str, np.ndarray, np.ndarray | None]] | None = None
        self._builder: threading.Thread | None = None

    # -- reads -------------------------------------------------------------------

    @property
    def config(self) -> IndexConfig:
        return self._config

    @property
    def kind(self) -> str:
        """The structure serving searches now: "exact", "ivf" or "hnsw"."""
        with self._rw.read():
            return self._backend.kind

    @property
    def rebuild_in_background(self) -> bool:
        return self._background

    @rebuild_in_background.setter
    def rebuild_in_background(self, value: bool) -> None:
        with self._writer:
            self._background = value

    @property
    def rebuilding(self) -> bool:
        """A background rebuild is running (searches use the previous structure)."""
        return self._pending is not None

    def stats(self) -> IndexStats:
        """Health figures for metrics and operators."""
        with self._rw.read():
            backend = self._backend
            return IndexStats(backend.kind, len(backend), self._rebuilds, **asdict(backend.stats()))

    def __len__(self) -> int:
        with self._rw.read():
            return len(self._backend)

    def contains(self, id_: int) -> bool:
        with self._rw.read():
            return bool(self._backend.present(np.array([id_], dtype=np.int64))[0])

    def ids(self) -> np.ndarray:
        """All live ids, sorted, int64."""
        with self._rw.read():
            return np.sort(self._backend.ids())

    def search(
        self, queries: np.ndarray, k: int, *, exclude: Collection[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids by inner product for each query row, best first, never an id in
        `exclude`. Returns (scores float32 (m, k), ids int64 (m, k)); when fewer
        than k vectors qualify the rest is padded with id -1 and score -inf."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self._config.dim:
            raise ValueError(f"queries must have shape (m, {self._config.dim}), got {q.shape}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        hidden = np.fromiter(exclude, dtype=np.int64) if exclude is not None and len(exclude) else None
        faiss.omp_set_num_threads(self._config.search_threads)
        with self._rw.read():
            return self._backend.search(q, k, hidden)

    # -- writes ------------------------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Upsert: store each vector under its id, replacing what the id held. If an
        id repeats within the batch, its last vector wins."""
        ids, vectors = self._validated_batch(ids, vectors)
        if not len(ids):
            return
        self._use_build_threads()
        with self._writer:
            backend = self._backend
            fresh = ~backend.present(ids)
            target = self._target_kind(len(backend) + int(fresh.sum()), backend.kind)
            if target != backend.kind and not self._background:
                # Crossing exact_max: build the new structure once from everything,
                # rather than filling the old one first.
                old_ids, old_vectors = backend.export()
                if len(old_ids):
                    kept = ~np.isin(old_ids, ids)
                    ids = np.concatenate([old_ids[kept], ids])
                    vectors = np.concatenate([old_vectors[kept], vectors])
                self._swap(self._build(target, ids, vectors))
                return
            for start in range(0, len(ids), WRITE_CHUNK):
                chunk = slice(start, start + WRITE_CHUNK)
                with self._rw.write():
                    backend.remove(ids[chunk][~fresh[chunk]])
                    backend.add(ids[chunk], vectors[chunk])
            if self._pending is not None:
                self._pending.append(("add", ids, vectors))
            self._restructure()

    def remove(self, ids: np.ndarray | Collection[int]) -> int:
        """Remove ids (absent ones are ignored); returns how many were present.
        Once this returns, no search returns them."""
        wanted = np.unique(self._validated_ids(ids))
        self._use_build_threads()
        with self._writer:
            backend = self._backend
            gone = wanted[backend.present(wanted)]
            if len(gone):
                with self._rw.write():
                    backend.remove(gone)
                if self._pending is not None:
                    self._pending.append(("remove", gone, None))
                self._restructure()
            return len(gone)

    def wait_for_rebuild(self, timeout: float | None = None) -> bool:
        """Block until no background rebuild is running (including one that a
        finished rebuild started); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            builder = self._builder
            if builder is None or not builder.is_alive():
                if builder is self._builder:
                    return True
                continue
            builder.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if builder.is_alive():
                return False

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Trade recall for latency without a rebuild (IVF nprobe, HNSW ef_search)."""
        changes = {k: v for k, v in {"nprobe": nprobe, "ef_search": ef_search}.items() if v is not None}
        with self._writer, self._rw.write():
            self._config = IndexConfig(**{**asdict(self._config), **changes})
            self._backend.tune(nprobe=self._config.nprobe, ef_search=self._config.ef_search)

    # -- persistence -----------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index, its id map, tombstones and config to one file,
        atomically (a crash leaves the previous file intact). Searches continue
        meanwhile; writers wait."""
        with self._writer:
            state = self._backend.state()
            meta = {
                "format": FORMAT_VERSION,
                "config": asdict(self._config),
                "kind": self._backend.kind,
                "params": state.params,
            }
            fileformat.write(Path(path), meta, state.arrays, state.index)

    @classmethod
    def load(cls, path: str | Path, *, rebuild_in_background: bool = False) -> VectorIndex:
        """Restore an index written by save(); CorruptIndexError if the file is
        truncated, corrupted or inconsistent."""
        meta, arrays, index = fileformat.read(Path(path))
        try:
            if meta["format"] != FORMAT_VERSION:
                raise ValueError(f"unsupported format version {meta['format']}")
            config = dict(meta["config"])
            loaded = cls(config.pop("dim"), **config, rebuild_in_background=rebuild_in_background)
            loaded._backend = loaded._restore(meta["kind"], BackendState(meta["params"], arrays, index))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptIndexError(f"{path}: inconsistent vector index: {exc}") from exc
        # A snapshot saved while a background rebuild was still running holds the
        # old structure (say, exact at 100k): start that rebuild again now rather
        # than wait for a write that may never come.
        with loaded._writer:
            loaded._restructure()
        return loaded

    # -- internals -------------------------------------------------------------------

    def _target_kind(self, n: int, current: str) -> str:
        """Exact up to exact_max; ANN above; back to exact only below exact_max / 2,
        so an index hovering around the threshold does not flip-flop."""
        if current == ExactBackend.kind:
            return self._config.ann if n > self._config.exact_max else ExactBackend.kind
        return ExactBackend.kind if n < self._config.exact_max // 2 else self._config.ann

    def _restructure(self) -> None:
        """After a write (writer mutex held): switch or rebuild if size or
        degradation calls for it."""
        if self._pending is not None:
            return  # one is being built; it re-checks when it lands
        backend = self._backend
        target = self._target_kind(len(backend), backend.kind)
        if target != backend.kind or backend.needs_rebuild():
            if not self._background:
                self._swap(self._build(target, *backend.export()))
                return
            ids, vectors = backend.export()
            self._pending = []
            self._builder = threading.Thread(
                target=self._build_in_background, args=(target, ids, vectors), name="vector-index-rebuild", daemon=True
            )
            self._builder.start()

    def _build_in_background(self, kind: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._use_build_threads()  # OpenMP thread count is per OS thread
        try:
            built = self._build(kind, ids, vectors)
        except Exception:  # keep serving from the old structure; the next write retries
            log.exception("background rebuild of a %d-vector index as %s failed", len(ids), kind)
            with self._writer:
                self._pending = None
            return
        with self._writer:
            for op, op_ids, op_vectors in self._pending or []:
                built.remove(op_ids[built.present(op_ids)])  # an add is an upsert: out first
                if op == "add":
                    built.add(op_ids, op_vectors)
            self._swap(built)
            self._pending = None
            self._restructure()  # the log may have grown it past another threshold

    def _build(self, kind: str, ids: np.ndarray, vectors: np.ndarray) -> Backend:
        c = self._config
        backend: Backend
        if kind == IVFBackend.kind:
            return IVFBackend.build(c.dim, ids, vectors, nlist=c.nlist, nprobe=c.nprobe)
        if kind == HNSWBackend.kind:
            backend = HNSWBackend.create(
                c.dim,
                m=c.hnsw_m,
                ef_construction=c.ef_construction,
                ef_search=c.ef_search,
                max_tombstone_ratio=c.max_tombstone_ratio,
            )
        else:
            backend = ExactBackend(c.dim)
        if len(ids):
            backend.add(ids, np.ascontiguousarray(vectors))
        return backend

    def _restore(self, kind: str, state: BackendState) -> Backend:
        c = self._config
        if kind == ExactBackend.kind:
            return ExactBackend.restore(c.dim, state)
        if kind == IVFBackend.kind:
            return IVFBackend.restore(c.dim, state, nprobe=c.nprobe)
        if kind == HNSWBackend.kind:
            return HNSWBackend.restore(c.dim, state, ef_search=c.ef_search, max_tombstone_ratio=c.max_tombstone_ratio)
        raise ValueError(f"unknown index kind {kind!r}")

    def _use_build_threads(self) -> None:
        threads = self._config.build_threads or len(os.sched_getaffinity(0))
        faiss.omp_set_num_threads(threads)

    def _swap(self, backend: Backend) -> None:
        with self._rw.write():
            self._backend = backend
            self._rebuilds += 1

    def _validated_ids(self, ids: Any) -> np.ndarray:
        array = np.asarray(list(ids) if isinstance(ids, set | frozenset) else ids)
        if array.size == 0:
            return np.empty(0, dtype=np.int64)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise ValueError(f"ids must be a 1-D integer array, got dtype {array.dtype} shape {array.shape}")
        array = array.astype(np.int64, copy=False)
        if (array < 0).any():
            raise ValueError("ids must be >= 0 (-1 marks padding in search results)")
        return np.ascontiguousarray(array)

    def _validated_batch(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = self._validated_ids(ids)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape != (len(ids), self._config.dim):
            raise ValueError(f"vectors must have shape ({len(ids)}, {self._config.dim}), got {vectors.shape}")
        if not np.isfinite(vectors).all():
            raise ValueError("vectors contain NaN or infinity")
        if len(np.unique(ids)) != len(ids):
            _, first_from_end = np.unique(ids[::-1], return_index=True)
            last = np.sort(len(ids) - 1 - first_from_end)
            ids, vectors = ids[last], vectors[last]
        return ids, vectors
