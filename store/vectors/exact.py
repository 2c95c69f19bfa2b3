"""Exact (brute-force) inner-product search over a dense matrix of live vectors.

Why not IndexIDMap2(IndexFlatIP): its remove_ids compacts the whole matrix and
rebuilds the reverse id map, O(N) per call (tens of ms at 200k vectors) while
holding the write lock, which stalls every concurrent search. Here a removal moves
the last row into the hole (O(dim)), and the search is the same faiss kernel the
flat index uses (knn_inner_product, SIMD, GIL released), so nothing is lost.
"""

from __future__ import annotations

from typing import ClassVar

import faiss
import numpy as np

from store.vectors.backend import BackendState, BackendStats, empty_result, excluding, padded, require


class ExactBackend:
    kind: ClassVar[str] = "exact"

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._vectors = np.empty((0, dim), dtype=np.float32)
        self._ids = np.empty(0, dtype=np.int64)
        self._n = 0
        self._row: dict[int, int] = {}

    def __len__(self) -> int:
        return self._n

    def present(self, ids: np.ndarray) -> np.ndarray:
        row = self._row
        return np.fromiter((i in row for i in ids.tolist()), dtype=bool, count=len(ids))

    def ids(self) -> np.ndarray:
        return self._ids[: self._n].copy()

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        start, end = self._n, self._n + len(ids)
        if end > len(self._ids):
            self._grow(end)
        self._vectors[start:end] = vectors
        self._ids[start:end] = ids
        self._row.update(zip(ids.tolist(), range(start, end), strict=True))
        self._n = end

    def remove(self, ids: np.ndarray) -> None:
        for id_ in ids.tolist():
            row = self._row.pop(id_)
            last = self._n - 1
            if row != last:
                moved = int(self._ids[last])
                self._vectors[row] = self._vectors[last]
                self._ids[row] = moved
                self._row[moved] = row
            self._n = last

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        m, n = len(queries), self._n
        if n == 0:
            return empty_result(m, k)
        keep = None
        if exclude is not None:
            rows = np.fromiter((self._row[i] for i in exclude.tolist() if i in self._row), dtype=np.int64)
            if len(rows):
                keep = excluding(rows)
        scores = np.empty((m, k), dtype=np.float32)
        rows_found = np.empty((m, k), dtype=np.int64)
        faiss.knn_inner_product(
            faiss.swig_ptr(queries),
            faiss.swig_ptr(self._vectors),
            self._dim,
            m,
            n,
            k,
            faiss.swig_ptr(scores),
            faiss.swig_ptr(rows_found),
            None if keep is None else keep[0],
        )
        ids = np.where(rows_found >= 0, self._ids[np.maximum(rows_found, 0)], -1)
        return padded(scores, ids)

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        return self._ids[: self._n].copy(), self._vectors[: self._n].copy()

    def needs_rebuild(self) -> bool:
        return False

    def stats(self) -> BackendStats:
        return BackendStats()

    def tune(self, *, nprobe: int, ef_search: int) -> None:
        """Exact search has no effort knob."""

    def state(self) -> BackendState:
        return BackendState(arrays={"ids": self._ids[: self._n], "vectors": self._vectors[: self._n]})

    @classmethod
    def restore(cls, dim: int, state: BackendState) -> ExactBackend:
        ids, vectors = state.arrays["ids"], state.arrays["vectors"]
        require(ids.ndim == 1 and vectors.shape == (len(ids), dim), "exact: ids and vectors disagree")
        require(len(np.unique(ids)) == len(ids), "exact: duplicate ids")
        backend = cls(dim)
        backend.add(ids, np.ascontiguousarray(vectors))
        return backend

    def _grow(self, needed: int) -> None:
        """Amortised doubling, like a list: appends stay O(dim) on average."""
        capacity = max(needed, 2 * len(self._ids), 1024)
        vectors = np.empty((capacity, self._dim), dtype=np.float32)
        vectors[: self._n] = self._vectors[: self._n]
        ids = np.empty(capacity, dtype=np.int64)
        ids[: self._n] = self._ids[: self._n]
        self._vectors, self._ids = vectors, ids
