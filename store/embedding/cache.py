"""An LRU cache of vectors by text content, in front of any embedder.

Agents revisit the same states again and again (the same room description, the same
error message), so a retrieval's query text has often been embedded before; serving
it from memory costs microseconds instead of milliseconds.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from store.embedding.base import Embedder, empty_matrix, text_list


class CachedEmbedder:
    """Wraps `inner`, remembering up to `max_entries` vectors (least recently used
    out first; ~1.6 kB each at 384 dimensions, so the default costs up to ~160 MB).

    Keys are 16-byte BLAKE2b digests of the UTF-8 text, so long texts cost no more
    key memory than short ones. The misses of one call are sent to `inner` in one
    batched call, each distinct text once, outside the lock, so a slow encode never
    blocks cache hits in other threads (two threads missing the same text at once
    may both encode it; the result is the same). Returned arrays are fresh copies:
    callers may modify them without touching the cache.

    `hits` counts texts served without encoding; `misses` counts distinct texts sent
    to `inner`. Both only grow, as Prometheus counters expect.
    """

    def __init__(self, inner: Embedder, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1; use the inner embedder directly for no cache")
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_entries = max_entries
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    def __len__(self) -> int:
        return len(self._vectors)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = text_list(texts)
        if not batch:
            return empty_matrix(self.dim)
        keys = [hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest() for text in batch]
        vectors = np.empty((len(batch), self.dim), dtype=np.float32)
        missing: dict[bytes, list[int]] = {}
        with self._lock:
            for row, key in enumerate(keys):
                cached = self._vectors.get(key)
                if cached is None:
                    missing.setdefault(key, []).append(row)
                else:
                    self._vectors.move_to_end(key)
                    vectors[row] = cached
            self._misses += len(missing)
            self._hits += len(batch) - len(missing)
        if not missing:
            return vectors
        fresh = self.inner.encode([batch[rows[0]] for rows in missing.values()])
        for (_, rows), vector in zip(missing.items(), fresh, strict=True):
            vectors[rows] = vector
        with self._lock:
            for key, vector in zip(missing, fresh, strict=True):
                self._vectors[key] = vector.copy()  # a row of its own, not a view keeping `fresh` alive
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.max_entries:
                self._vectors.popitem(last=False)
        return vectors
