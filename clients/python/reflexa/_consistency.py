"""Read-your-writes: consistency tokens, and the session that remembers them.

Every write answers with a ``consistency_token`` naming the indexing jobs it queued
(``"c1.12.15"``: jobs 12 to 15 of the namespace; ``"c1.0"``: nothing to wait for).
A retrieve that sends the token waits until those jobs are done, so it sees the
write. Tokens are opaque to users, but the client may merge them: waiting for the
id range ``min..max`` of several tokens waits for every job of each.

:class:`ConsistencySession` keeps, per namespace, the tokens of the client's own
writes that no successful retrieve has waited for yet. That is what lets an agent
finish an episode and retrieve it in the next one without handling tokens at all:
with an ingest-to-searchable lag of seconds, an online learner on short episodes
otherwise never sees its own recent experience.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from reflexa.errors import ConsistencyTimeout, InvalidInput

log = logging.getLogger("reflexa")

#: The token of a write that queued nothing: the identity of :func:`merge_tokens`.
NO_WRITES = "c1.0"

#: Tokens kept per namespace before the oldest are merged together (bounds memory
#: for a client that writes a lot and never retrieves).
_MAX_ENTRIES = 64


def _job_range(token: str) -> tuple[int, int] | None:
    """``(first, last)`` of a ``c1`` token; ``None`` for one this client cannot read."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != "c1":
        return None
    try:
        first, last = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (first, last) if 0 < first <= last else None


def merge_tokens(*tokens: str | None) -> str | None:
    """One token that waits for everything each of ``tokens`` waits for.

    ``None`` and ``"c1.0"`` add nothing (``None`` if nothing is left). A token in a
    format this client does not know cannot be combined; the newest such token (the
    last argument) is kept then, and a debug message says what was dropped.
    """
    merged: str | None = None
    for token in tokens:
        if token is None or token == NO_WRITES:
            continue
        if merged is None:
            merged = token
            continue
        a, b = _job_range(merged), _job_range(token)
        if a is None or b is None:
            log.debug("cannot merge consistency tokens %r and %r; keeping the newer", merged, token)
            merged = token
            continue
        merged = f"c1.{min(a[0], b[0])}.{max(a[1], b[1])}"
    return merged


class ConsistencySession:
    """Per namespace, the tokens of this client's writes not yet waited for by a
    successful retrieve. Thread-safe: an episode's sender thread records its writes
    while the agent's thread retrieves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        #: namespace -> [(sequence number of the write, token)], oldest first
        self._pending: dict[str, list[tuple[int, str]]] = {}

    def record(self, namespace: str, token: str | None) -> None:
        """Remember the token of a write to ``namespace`` (``c1.0`` is nothing to remember)."""
        if token is None or token == NO_WRITES:
            return
        with self._lock:
            self._seq += 1
            entries = self._pending.setdefault(namespace, [])
            entries.append((self._seq, token))
            if len(entries) > _MAX_ENTRIES:
                # Merge the older half into one entry carrying the newest sequence
                # number among them: it is settled only once all of them are.
                half = entries[: len(entries) // 2]
                merged = merge_tokens(*(t for _, t in half))
                entries[: len(half)] = [(half[-1][0], merged)] if merged else []

    def pending(self, namespace: str) -> tuple[str | None, int]:
        """The merged token to wait for now, and the mark to :meth:`settle` with once
        a retrieve that sent it succeeded."""
        with self._lock:
            entries = self._pending.get(namespace)
            if not entries:
                return None, 0
            return merge_tokens(*(t for _, t in entries)), entries[-1][0]

    def choose(self, namespace: str, consistency: str) -> tuple[str | None, int | None]:
        """What a retrieve with ``consistency`` sends, and the mark to settle after it
        succeeded (``None``: it did not use the session)."""
        if consistency == "session":
            return self.pending(namespace)
        if consistency == "none":
            return None, None
        if not isinstance(consistency, str) or not consistency:
            raise InvalidInput('expected "session", "none" or a consistency token', field="consistency")
        return consistency, None

    def settle(self, namespace: str, mark: int) -> None:
        """Forget the writes up to ``mark``: a retrieve has waited for them. Writes
        that arrived meanwhile stay pending for the next retrieve."""
        with self._lock:
            entries = self._pending.get(namespace)
            if not entries:
                return
            remaining = [entry for entry in entries if entry[0] > mark]
            if remaining:
                self._pending[namespace] = remaining
            else:
                del self._pending[namespace]

    @contextmanager
    def waiting(self, namespace: str, consistency: str) -> Iterator[str | None]:
        """Around one retrieve (or batch): yields the token to send; on success the
        writes it covered are settled. A timeout keeps them pending (the next
        retrieve waits again), unless their indexing failed, which no wait fixes."""
        token, mark = self.choose(namespace, consistency)
        try:
            yield token
        except ConsistencyTimeout as exc:
            if mark is not None and exc.rule == "indexing_failed":
                self.settle(namespace, mark)
            raise
        if mark is not None:
            self.settle(namespace, mark)
