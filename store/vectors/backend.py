"""The contract between VectorIndex and the index structures behind it (exact, IVF,
HNSW), and the small pieces they share.

VectorIndex owns locking, validation, upsert semantics and the choice of structure;
a backend only stores vectors under external int64 ids and searches them. The
facade guarantees what the backends rely on: ids passed to `add` are unique and
absent, ids passed to `remove` are unique and present, vectors are float32 C-order
of the right dimension, and no mutation ever runs concurrently with anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import faiss
import numpy as np

# Score of a padding slot (id -1): below any real inner product, so a padded slot
# never passes a similarity threshold and always sorts last.
PAD_SCORE = np.float32(-np.inf)


@dataclass
class BackendState:
    """What a backend persists: scalar parameters, numpy arrays and at most one
    faiss index (serialised by faiss itself)."""

    params: dict[str, int | float] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    index: faiss.Index | None = None


@dataclass(frozen=True)
class BackendStats:
    """Structure-specific health figures (zero where a structure has no such thing)."""

    tombstones: int = 0
    lists: int = 0
    imbalance: float = 0.0


class Backend(Protocol):
    """One index structure. Not thread-safe by itself: VectorIndex serialises writes
    and lets only searches (and other reads) run concurrently."""

    kind: ClassVar[str]

    def __len__(self) -> int:
        """Number of live vectors."""
        ...

    def present(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask: which of ids are live."""
        ...

    def ids(self) -> np.ndarray:
        """The live ids, int64, in no particular order."""
        ...

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Store vectors under ids (unique, not yet present)."""
        ...

    def remove(self, ids: np.ndarray) -> None:
        """Drop ids (unique, all present)."""
        ...

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product, never returning an id in exclude; (scores, ids)
        of shape (m, k), padded with PAD_SCORE / -1."""
        ...

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """All live (ids, vectors), copies: the input of a rebuild."""
        ...

    def needs_rebuild(self) -> bool:
        """True when the structure has degraded (tombstones, outgrown training) so
        that rebuilding it from export() would serve better."""
        ...

    def stats(self) -> BackendStats:
        """Tombstones (HNSW), list count and imbalance (IVF)."""
        ...

    def tune(self, *, nprobe: int, ef_search: int) -> None:
        """Set the search-time effort knobs this structure uses (others ignored)."""
        ...

    def state(self) -> BackendState:
        """Everything needed to restore this backend exactly."""
        ...


def excluding(ids: np.ndarray) -> tuple[faiss.IDSelector, faiss.IDSelector]:
    """A selector accepting every id except `ids` (in the id space the faiss index
    sees). Returns (selector, inner): keep both alive for the duration of the
    search, faiss holds the inner one by raw pointer."""
    inner = faiss.IDSelectorBatch(len(ids), faiss.swig_ptr(ids))
    return faiss.IDSelectorNot(inner), inner


def padded(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """faiss pads missing results with -1 and a huge negative (or positive) number;
    make every padding slot score PAD_SCORE whatever structure produced it."""
    scores[ids < 0] = PAD_SCORE
    return scores, ids


def empty_result(m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((m, k), PAD_SCORE, dtype=np.float32), np.full((m, k), -1, dtype=np.int64)


def require(condition: bool, message: str) -> None:
    """Validation of restored state; ValueError is turned into CorruptIndexError by
    the loader."""
    if not condition:
        raise ValueError(message)
