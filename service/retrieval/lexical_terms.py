"""Which of a query's words the lexical index is searched by.

An OR query costs what its words match: "you", "are", "the" are in nearly every
state, so searching by them makes the engine score nearly every document (FTS5:
17 ms at 10k states, 208 ms at 100k), for words whose inverse document frequency
is about zero anyway. So a query searches by its rarest words only, as many as fit
a budget of postings (the documents the chosen words are in, summed); when even
the rarest is in more documents than that, the lexical search is skipped and the
dense search alone finds the candidates (the lexical similarity still ranks them).

Counts come from the engine (`store.lexical.list_term_counts`) and are kept per
process for `ttl` seconds: reading a common word's count costs as much as its
posting list, and agents' states repeat a small vocabulary, so nearly every word of
a query is already known.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from sqlalchemy.orm import Session

from store import lexical as lexical_repo

POSTING_BUDGET = 2_000  # FTS5 with the namespace join: 0.5-1.4 us a posting here, so 1-3 ms
TTL_SECONDS = 300.0


class TermCounts:
    def __init__(
        self,
        *,
        budget: int = POSTING_BUDGET,
        ttl: float = TTL_SECONDS,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._counts: OrderedDict[str, tuple[int, float]] = OrderedDict()  # word -> (count, read at)
        self._lock = threading.Lock()

    def searchable(self, session: Session, words: list[str]) -> list[str]:
        """The rarest of `words` whose counts sum to at most the budget (rarest first)."""
        counts = self.counts(session, words)
        chosen: list[str] = []
        total = 0
        for word in sorted(words, key=lambda w: (counts[w], w)):
            if total + counts[word] > self.budget:
                break
            chosen.append(word)
            total += counts[word]
        return chosen

    def counts(self, session: Session, words: list[str]) -> dict[str, int]:
        now = self.clock()
        out: dict[str, int] = {}
        with self._lock:
            for word in words:
                hit = self._counts.get(word)
                if hit is not None and now - hit[1] < self.ttl:
                    out[word] = hit[0]
        missing = [w for w in words if w not in out]
        if missing:
            fresh = lexical_repo.list_term_counts(session, missing)
            out.update(fresh)
            with self._lock:
                for word, count in fresh.items():
                    self._counts[word] = (count, now)
                    self._counts.move_to_end(word)
                while len(self._counts) > self.max_entries:
                    self._counts.popitem(last=False)
        return out
