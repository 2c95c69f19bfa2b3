"""A snapshot's memory in this process: exact vector search per (kind, field) and
a lexical index over its state texts, loaded once from the snapshot's copies.

Exact (a matrix product, ties broken by pk) rather than the live HNSW/IVF indexes:
a snapshot never changes, so its answers must not either, whatever order the live
index was built in. Searching costs O(n·d) per query; see docs/trainers.md.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from store.lexical import MAX_QUERY_TOKENS, MAX_TOKEN_CHARS, tokens


class PinnedIndex:
    """Exact inner-product search over a fixed set of unit vectors."""

    def __init__(self, pks: Sequence[int], matrix: np.ndarray) -> None:
        self.pks = np.asarray(pks, dtype=np.int64)
        self.matrix = matrix

    def __len__(self) -> int:
        return len(self.pks)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Like faiss: (scores, ids), each (n_queries, k), ids padded with -1. Each
        query is scored on its own (a matrix-vector product), so a query's answer
        does not depend on which other queries share the call."""
        n = len(self.pks)
        k = max(0, min(k, n))
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        if k == 0:
            return scores, ids
        for i, q in enumerate(np.asarray(queries, dtype=np.float32)):
            s = self.matrix @ q
            # The k best, descending score then ascending pk (rows are in pk order):
            # everything tied with the k-th is kept before the cut, so the order
            # never depends on how the partition broke ties.
            kth = np.partition(s, n - k)[n - k]
            best = np.flatnonzero(s >= kth)
            order = best[np.lexsort((best, -s[best]))][:k]
            scores[i, : len(order)] = s[order]
            ids[i, : len(order)] = self.pks[order]
        return scores, ids


_UNSEEN = object()


class PinnedLexicon:
    """Best lexical matches among a fixed set of texts: BM25 over the same tokens the
    SQL lexical index uses (no stop words, numbers kept). Each word's BM25 terms are
    fixed with the texts (`_term`), so a query costs one `bincount` over its words'.
    Shared by the threads of concurrent requests: two that make the same term at once
    each make it, and the memo's size count may drift by that much."""

    K1 = 1.2
    B = 0.75

    def __init__(self, docs: Iterable[tuple[int, str, str]]) -> None:
        pks: list[int] = []
        kinds: list[str] = []
        counted: list[dict[str, int]] = []
        for pk, kind, text in docs:
            counts: dict[str, int] = defaultdict(int)
            for w in tokens(text):
                counts[w] += 1
            pks.append(pk)
            kinds.append(kind)
            counted.append(counts)
        self.pks = np.asarray(pks, dtype=np.int64)
        lengths = np.asarray([sum(c.values()) for c in counted], dtype=np.float64)
        mean = float(lengths.mean()) if len(lengths) else 0.0
        norm = self.K1 * (1 - self.B + self.B * lengths / (mean or 1.0))
        grouped: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
        self.docs_per_kind: dict[str, int] = defaultdict(int)
        for position, (kind, counts) in enumerate(zip(kinds, counted, strict=True)):
            self.docs_per_kind[kind] += 1
            for w, tf in counts.items():
                at, weights = grouped.setdefault((kind, w), ([], []))
                at.append(position)
                weights.append(tf * (self.K1 + 1) / (tf + norm[position]))
        self.postings = {
            key: (np.asarray(at, dtype=np.int64), np.asarray(weights, dtype=np.float64))
            for key, (at, weights) in grouped.items()
        }
        self._terms: dict[tuple[tuple[str, ...], str], tuple[np.ndarray, np.ndarray] | None] = {}
        # The terms kept, bounded to four copies of the postings (one per distinct kinds asked for)
        self._terms_size = 0
        self._terms_budget = 4 * sum(len(at) for at, _ in self.postings.values()) + 4096

    def matches(self, kinds: Sequence[str], query: str, limit: int) -> list[tuple[int, float]]:
        words = list(dict.fromkeys(t for t in tokens(query) if len(t) <= MAX_TOKEN_CHARS))[:MAX_QUERY_TOKENS]
        asked = tuple(kinds)
        terms = [t for w in words if (t := self._term(asked, w)) is not None]
        if not terms:
            return []
        at = np.concatenate([a for a, _ in terms])
        # Each text's terms added in the query's word order, as one loop over the words
        # would add them: the same sums to the bit.
        scores = np.bincount(at, weights=np.concatenate([c for _, c in terms]), minlength=len(self.pks))
        found = np.flatnonzero(np.bincount(at, minlength=len(self.pks)))
        # Descending score, then ascending pk: the same order every time.
        order = found[np.lexsort((self.pks[found], -scores[found]))][:limit]
        return list(zip(self.pks[order].tolist(), scores[order].tolist(), strict=True))

    def _term(self, kinds: tuple[str, ...], word: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The texts of these kinds holding `word`, and the word's BM25 term in each
        (idf × the posting's weight): fixed with the texts, so made once per (kinds,
        word); a rollout batch asks for the same few words thousands of times."""
        key = (kinds, word)
        term = self._terms.get(key, _UNSEEN)
        if term is _UNSEEN:
            postings = [p for k in kinds if (p := self.postings.get((k, word))) is not None]
            term = None
            if postings:
                n = sum(self.docs_per_kind.get(k, 0) for k in kinds)
                df = sum(len(at) for at, _ in postings)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                term = (np.concatenate([at for at, _ in postings]), np.concatenate([idf * w for _, w in postings]))
            size = 1 + (len(term[0]) if term is not None else 0)
            if self._terms_size + size > self._terms_budget:
                self._terms.clear()  # a bound, not an LRU: a batch re-makes its few words at once
                self._terms_size = 0
            self._terms[key] = term
            self._terms_size += size
        return term


class PinnedMemory:
    """One snapshot's indexes, shaped like the live IndexRegistry for the search code."""

    def __init__(self, indexes: dict[tuple[str, str], PinnedIndex], lexicon: PinnedLexicon) -> None:
        self.indexes = indexes
        self.lexicon = lexicon

    @classmethod
    def build(
        cls, vectors: Iterable[tuple[str, str, int, bytes]], texts: Iterable[tuple[int, str, str]]
    ) -> PinnedMemory:
        grouped: dict[tuple[str, str], tuple[list[int], list[np.ndarray]]] = {}
        for kind, field, pk, blob in vectors:
            pks, rows = grouped.setdefault((kind, field), ([], []))
            pks.append(pk)
            rows.append(np.frombuffer(blob, dtype="<f4"))
        indexes = {key: PinnedIndex(pks, np.vstack(rows)) for key, (pks, rows) in grouped.items()}
        return cls(indexes, PinnedLexicon(texts))

    def index(self, ns: str, kind: str, field: str) -> PinnedIndex | None:
        return self.indexes.get((kind, field))

    @property
    def vector_count(self) -> int:
        return sum(len(i) for i in self.indexes.values())


class PinnedCache:
    """The snapshots loaded in this process, least recently used evicted past
    `max_vectors` (one snapshot is always kept, however large)."""

    def __init__(self, max_vectors: int = 2_000_000) -> None:
        self.max_vectors = max_vectors
        self._items: OrderedDict[int, PinnedMemory] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[int, threading.Lock] = defaultdict(threading.Lock)

    def get(self, snapshot_pk: int, load: Callable[[], PinnedMemory]) -> PinnedMemory:
        with self._lock:
            hit = self._items.get(snapshot_pk)
            if hit is not None:
                self._items.move_to_end(snapshot_pk)
                return hit
            gate = self._loading[snapshot_pk]
        with gate:  # one loader per snapshot; the others wait for it
            with self._lock:
                hit = self._items.get(snapshot_pk)
            if hit is not None:
                return hit
            memory = load()
            with self._lock:
                self._items[snapshot_pk] = memory
                self._items.move_to_end(snapshot_pk)
                total = sum(m.vector_count for m in self._items.values())
                while len(self._items) > 1 and total > self.max_vectors:
                    _, evicted = self._items.popitem(last=False)
                    total -= evicted.vector_count
                self._loading.pop(snapshot_pk, None)
            return memory
