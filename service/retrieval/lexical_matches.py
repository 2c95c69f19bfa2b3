"""A process's recent lexical matches, reused while the lexical index stands still.

A repeated query (an agent back in a state it has seen: the query's vectors are
cached, so the encode is skipped) would otherwise run the same lexical search again:
2.4-2.6 ms of SQL on SQLite, 7-8 ms on PostgreSQL, where a cache hit waited for it
(bench.retrieval.stages, docs/benchmarks.md). The matches depend only on the words searched, the
namespace, the kinds, the limit and the index's contents; the contents are stood for
by `store.lexical.read_generation`, a counter that every write to the lexical texts
moves in its own transaction (migration 0021). It is read before the search, so a
kept answer is never older than the counter it is kept under: a reused answer is
the one a search would give now.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from sqlalchemy.orm import Session

from store import lexical as lexical_repo

MAX_ENTRIES = 4_096  # ~50 matches each: under 10 MB

_Key = tuple[str, tuple[str, ...], tuple[str, ...], int]  # namespace, kinds, words, limit


class LexicalMatches:
    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._kept: OrderedDict[_Key, tuple[int, list[tuple[int, float]]]] = OrderedDict()
        self._lock = threading.Lock()

    def matches(
        self, session: Session, generation: int, namespace: str, kinds: Sequence[str], words: Sequence[str], limit: int
    ) -> list[tuple[int, float]]:
        """`store.lexical.list_word_matches`, or its answer kept from a search at the
        same `generation` (read on `session` before this call). Callers must not
        change the list."""
        if not words or not kinds:
            return []
        key: _Key = (namespace, tuple(kinds), tuple(words), limit)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept[0] == generation:
                self._kept.move_to_end(key)
                return kept[1]
        found = lexical_repo.list_word_matches(session, namespace, kinds, words, limit)
        with self._lock:
            current = self._kept.get(key)
            if current is None or current[0] <= generation:  # never replace a newer answer
                self._kept[key] = (generation, found)
                self._kept.move_to_end(key)
            while len(self._kept) > self.max_entries:
                self._kept.popitem(last=False)
        return found
