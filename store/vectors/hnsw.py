"""HNSW-Flat graph search with tombstones.

faiss HNSW cannot remove a vector: the graph keeps every node. So vectors get
sequential internal ids (faiss' own labels), `labels` maps internal -> external id,
and a removal (or the old copy of an upserted id) becomes a tombstone: its label is
set to -1 and its bit cleared in the `live` bitmap. Searches pass that bitmap to
faiss as an IDSelector, so dead nodes are still traversed (the graph stays
connected) but never returned, and k live results come back as long as they exist
within the search beam. Tombstones cost memory and a little recall, so past
`max_tombstone_ratio` of all nodes needs_rebuild() asks for a fresh graph.
"""

from __future__ import annotations

from typing import ClassVar

import faiss
import numpy as np

from store.vectors.backend import BackendState, BackendStats, empty_result, excluding, padded, require


class HNSWBackend:
    kind: ClassVar[str] = "hnsw"

    def __init__(
        self, index: faiss.IndexHNSWFlat, labels: np.ndarray, *, ef_search: int, max_tombstone_ratio: float
    ) -> None:
        """`labels` holds one external id (or -1 for a tombstone) per graph node."""
        self._index = index
        self._ef_search = ef_search
        self._max_tombstone_ratio = max_tombstone_ratio
        n = index.ntotal
        self._labels = np.full(max(n, 1024), -1, dtype=np.int64)
        self._labels[:n] = labels
        self._live = np.zeros(len(self._labels) // 8 + 1, dtype=np.uint8)
        alive = np.flatnonzero(labels >= 0)
        self._set_bits(alive, True)
        self._internal: dict[int, int] = dict(zip(labels[alive].tolist(), alive.tolist(), strict=True))
        self._tombstones = n - len(alive)

    @classmethod
    def create(
        cls, dim: int, *, m: int, ef_construction: int, ef_search: int, max_tombstone_ratio: float
    ) -> HNSWBackend:
        index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        return cls(index, np.empty(0, dtype=np.int64), ef_search=ef_search, max_tombstone_ratio=max_tombstone_ratio)

    def __len__(self) -> int:
        return len(self._internal)

    def present(self, ids: np.ndarray) -> np.ndarray:
        internal = self._internal
        return np.fromiter((i in internal for i in ids.tolist()), dtype=bool, count=len(ids))

    def ids(self) -> np.ndarray:
        return np.fromiter(self._internal, dtype=np.int64, count=len(self._internal))

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        start = self._index.ntotal
        end = start + len(ids)
        if end > len(self._labels):
            self._grow(end)
        self._index.add(vectors)
        self._labels[start:end] = ids
        self._set_bits(np.arange(start, end), True)
        self._internal.update(zip(ids.tolist(), range(start, end), strict=True))

    def remove(self, ids: np.ndarray) -> None:
        internal = np.fromiter((self._internal.pop(i) for i in ids.tolist()), dtype=np.int64, count=len(ids))
        self._labels[internal] = -1
        self._set_bits(internal, False)
        self._tombstones += len(internal)

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if not self._internal:
            return empty_result(len(queries), k)
        keep_alive: list[faiss.IDSelector] = []
        selector = None
        if self._tombstones:
            selector = faiss.IDSelectorBitmap(len(self._live), faiss.swig_ptr(self._live))
            keep_alive.append(selector)
        if exclude is not None:
            hidden = np.fromiter((self._internal[i] for i in exclude.tolist() if i in self._internal), dtype=np.int64)
            if len(hidden):
                not_hidden, inner = excluding(hidden)
                keep_alive += [not_hidden, inner]
                selector = not_hidden if selector is None else faiss.IDSelectorAnd(selector, not_hidden)
                keep_alive.append(selector)
        params = faiss.SearchParametersHNSW(efSearch=max(self._ef_search, k))
        if selector is not None:
            params.sel = selector
        scores, internal = self._index.search(queries, k, params=params)
        ids = np.where(internal >= 0, self._labels[np.maximum(internal, 0)], -1)
        return padded(scores, ids)

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        n = self._index.ntotal
        alive = np.flatnonzero(self._labels[:n] >= 0)
        storage = faiss.downcast_index(self._index.storage)
        stored = faiss.rev_swig_ptr(storage.get_xb(), n * self._index.d).reshape(n, self._index.d)
        return self._labels[alive], stored[alive]

    def needs_rebuild(self) -> bool:
        return self._tombstones > self._max_tombstone_ratio * self._index.ntotal

    def stats(self) -> BackendStats:
        return BackendStats(tombstones=self._tombstones)

    def tune(self, *, nprobe: int, ef_search: int) -> None:
        self._ef_search = ef_search

    def state(self) -> BackendState:
        return BackendState(arrays={"labels": self._labels[: self._index.ntotal]}, index=self._index)

    @classmethod
    def restore(cls, dim: int, state: BackendState, *, ef_search: int, max_tombstone_ratio: float) -> HNSWBackend:
        # read_index already returns the concrete class; downcast_index would return a
        # second, non-owning wrapper and the object could be freed under it.
        index = state.index
        labels = state.arrays["labels"]
        require(isinstance(index, faiss.IndexHNSWFlat), "hnsw: stored index is not IndexHNSWFlat")
        require(index.d == dim and index.metric_type == faiss.METRIC_INNER_PRODUCT, "hnsw: dim or metric mismatch")
        require(labels.ndim == 1 and index.ntotal == len(labels), "hnsw: labels disagree with the graph")
        alive = labels[labels >= 0]
        require(len(np.unique(alive)) == len(alive), "hnsw: duplicate live ids")
        return cls(index, labels, ef_search=ef_search, max_tombstone_ratio=max_tombstone_ratio)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * len(self._labels))
        labels = np.full(capacity, -1, dtype=np.int64)
        labels[: len(self._labels)] = self._labels
        live = np.zeros(capacity // 8 + 1, dtype=np.uint8)
        live[: len(self._live)] = self._live
        self._labels, self._live = labels, live

    def _set_bits(self, internal: np.ndarray, value: bool) -> None:
        masks = np.left_shift(1, internal & 7).astype(np.uint8)
        if value:
            np.bitwise_or.at(self._live, internal >> 3, masks)
        else:
            np.bitwise_and.at(self._live, internal >> 3, ~masks)
