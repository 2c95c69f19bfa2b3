"""IVF-Flat: k-means coarse quantizer, vectors stored raw in inverted lists.

Ids live in the inverted lists themselves (IndexIVF's native add_with_ids and
remove_ids): wrapping an IVF index in IndexIDMap2 silently corrupts the id map after
remove_ids (faiss issues #4535, #1379), so it is never done. A hashtable DirectMap
makes remove O(removed) instead of a scan of every list, and gives reconstruct()
for rebuilds.

Training happens once, on the vectors present at build time, so needs_rebuild()
asks for a retrain in two cases. Growth: past REGROW_FACTOR times the trained size
the lists are too long for the nlist chosen then. Drift: vectors unlike the
training set (a new environment family joining a namespace) all land in the few
lists nearest to them. Recall holds (those are the lists a query for them probes)
but the cost does not: on agent-state embeddings, training on 25k text-game states
and then adding 75k gridworld, web and shell states made the largest list 140x the
mean and doubled median latency. faiss' imbalance factor (expected scan cost
relative to equal lists: ~1.3 after k-means on this data, 11-13 in that drift case)
measures exactly this, so a retrain is due when it doubles from its value right
after the build; `python -m bench.embedding.vector_index` reports the drift case.
"""

from __future__ import annotations

import math
from typing import ClassVar

import faiss
import numpy as np

from store.vectors.backend import BackendState, BackendStats, empty_result, excluding, padded, require

# k-means sample per centroid: faiss warns below 39; 64 keeps training 1M vectors
# into 4000 lists near two minutes on 2 cores.
TRAIN_POINTS_PER_LIST = 64
REGROW_FACTOR = 4
IMBALANCE_GROWTH = 2.0


def auto_nlist(n: int) -> int:
    """~4*sqrt(N) lists (the usual rule), but never fewer than 39 training points
    per list, and at least one list."""
    return max(1, min(round(4 * math.sqrt(n)), n // 39))


class IVFBackend:
    kind: ClassVar[str] = "ivf"

    def __init__(
        self, index: faiss.IndexIVFFlat, ids: set[int], *, trained_n: int, baseline_imbalance: float, nprobe: int
    ) -> None:
        """`trained_n` / `baseline_imbalance`: size and list imbalance right after
        the last training, the references for needs_rebuild()."""
        self._index = index
        self._ids = ids
        self._trained_n = trained_n
        self._baseline_imbalance = baseline_imbalance
        self._nprobe = nprobe

    @classmethod
    def build(
        cls, dim: int, ids: np.ndarray, vectors: np.ndarray, *, nlist: int | None, nprobe: int, seed: int = 1234
    ) -> IVFBackend:
        """Train on (a deterministic sample of) vectors, then add them all. Needs at
        least one vector: k-means has nothing to learn from an empty set."""
        n = len(ids)
        require(n > 0, "ivf: cannot train on no vectors")
        lists = min(nlist, n) if nlist is not None else auto_nlist(n)
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, lists, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed
        index.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
        index.own_fields = True
        quantizer.this.disown()
        index.set_direct_map_type(faiss.DirectMap.Hashtable)
        sample = min(n, lists * TRAIN_POINTS_PER_LIST)
        rows = np.random.default_rng(seed).choice(n, size=sample, replace=False) if sample < n else slice(None)
        index.train(np.ascontiguousarray(vectors[rows]))
        backend = cls(index, set(), trained_n=n, baseline_imbalance=1.0, nprobe=nprobe)
        backend.add(ids, vectors)
        backend._baseline_imbalance = backend._imbalance()
        return backend

    def __len__(self) -> int:
        return len(self._ids)

    def present(self, ids: np.ndarray) -> np.ndarray:
        live = self._ids
        return np.fromiter((i in live for i in ids.tolist()), dtype=bool, count=len(ids))

    def ids(self) -> np.ndarray:
        return np.fromiter(self._ids, dtype=np.int64, count=len(self._ids))

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._index.add_with_ids(vectors, ids)
        self._ids.update(ids.tolist())

    def remove(self, ids: np.ndarray) -> None:
        # The hashtable DirectMap only accepts an explicit IDSelectorArray.
        selector = faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids))
        removed = self._index.remove_ids(selector)
        require(removed == len(ids), f"ivf: removed {removed} of {len(ids)} ids")
        self._ids.difference_update(ids.tolist())

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if not self._ids:
            return empty_result(len(queries), k)
        keep = excluding(exclude) if exclude is not None and len(exclude) else None
        params = faiss.SearchParametersIVF(nprobe=self._nprobe)
        if keep is not None:
            params.sel = keep[0]
        scores, ids = self._index.search(queries, k, params=params)
        return padded(scores, ids)

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        ids = self.ids()
        return ids, self._index.reconstruct_batch(ids)

    def needs_rebuild(self) -> bool:
        if len(self._ids) > REGROW_FACTOR * self._trained_n:
            return True
        return self._imbalance() > IMBALANCE_GROWTH * self._baseline_imbalance

    def stats(self) -> BackendStats:
        return BackendStats(lists=self._index.nlist, imbalance=self._imbalance())

    def tune(self, *, nprobe: int, ef_search: int) -> None:
        self._nprobe = nprobe

    def state(self) -> BackendState:
        params = {"trained_n": self._trained_n, "baseline_imbalance": self._baseline_imbalance}
        return BackendState(params=params, arrays={"ids": self.ids()}, index=self._index)

    @classmethod
    def restore(cls, dim: int, state: BackendState, *, nprobe: int) -> IVFBackend:
        # read_index already returns the concrete class; downcast_index would return a
        # second, non-owning wrapper and the object could be freed under it.
        index = state.index
        ids = state.arrays["ids"]
        require(isinstance(index, faiss.IndexIVFFlat), "ivf: stored index is not IndexIVFFlat")
        require(index.d == dim and index.metric_type == faiss.METRIC_INNER_PRODUCT, "ivf: dim or metric mismatch")
        require(index.ntotal == len(ids) and ids.ndim == 1, "ivf: id list disagrees with the index")
        require(index.direct_map.type == faiss.DirectMap.Hashtable, "ivf: missing hashtable direct map")
        live = set(ids.tolist())
        require(len(live) == len(ids), "ivf: duplicate ids")
        return cls(
            index,
            live,
            trained_n=int(state.params["trained_n"]),
            baseline_imbalance=float(state.params["baseline_imbalance"]),
            nprobe=nprobe,
        )

    def _imbalance(self) -> float:
        """sum(list size^2) * nlist / N^2: the expected scan cost of a query
        relative to equal lists (computed in C++, microseconds for 4000 lists)."""
        return self._index.invlists.imbalance_factor() if self._ids else 1.0
