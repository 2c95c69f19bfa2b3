"""The queue and sender thread behind :class:`reflexa.episode.Episode`.

Steps arrive already validated and serialised. The queue is bounded; indexes are
given only to steps that fit, so what is stored stays contiguous. One daemon
thread sends in order — create (with the first steps), appends, outcome — so the
server always sees a trajectory grow the way the agent lived it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from reflexa import _operations as ops
from reflexa._spool import Spool, SpooledRequest
from reflexa._transport import SyncTransport
from reflexa.errors import ConsistencyTimeout, ReflexaError

log = logging.getLogger("reflexa.episode")

OutcomeState = Literal["none", "pending", "sent", "failed", "spooled"]

#: Between delivery attempts once the transport's own retries have given up.
_FIRST_PAUSE = 0.5
_MAX_PAUSE = 10.0


@dataclass(frozen=True)
class EpisodeStats:
    """Where every step of an episode went.

    ``accepted`` steps got an index; each is eventually ``sent`` (the server stored
    it), ``spooled`` (not delivered within ``flush_timeout``, kept in the client's
    local spool to be replayed when the server is back) or ``failed`` (a permanent
    error, or not delivered in time without a spool); until then it is ``pending``.
    ``dropped`` steps never got an index: the buffer was full. An outcome kept in
    the spool is ``spooled`` too.
    """

    accepted: int
    sent: int
    failed: int
    dropped: int
    outcome: OutcomeState
    last_error: ReflexaError | None
    spooled: int = 0

    @property
    def pending(self) -> int:
        return self.accepted - self.sent - self.failed - self.spooled

    @property
    def delivered(self) -> bool:
        """Everything given to the episode reached the server."""
        return (
            self.dropped == 0
            and self.failed == 0
            and self.spooled == 0
            and self.pending == 0
            and self.outcome in ("none", "sent")
        )


@dataclass(frozen=True)
class _Work:
    """One request: steps to create the trajectory with or to append, and maybe the outcome."""

    create: bool
    steps: list[dict[str, Any]]
    outcome: dict[str, Any] | None


class EpisodeSender:
    """Buffers one episode's steps and delivers them from a daemon thread.

    ``on_failure`` is called from the sender thread when delivery stops for good.
    """

    def __init__(
        self,
        transport: SyncTransport,
        namespace: str,
        header: dict[str, Any],
        *,
        batch_size: int,
        flush_interval: float,
        max_buffered_steps: int,
        flush_timeout: float = 10.0,
        wait_searchable_ms: int = 0,
        on_failure: Callable[[ReflexaError], None],
        spool: Spool | None = None,
    ) -> None:
        self._transport = transport
        self._namespace = namespace
        self._header = header
        self._id: str = header["id"]
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_buffered = max_buffered_steps
        self._flush_timeout = flush_timeout
        self._wait_searchable_ms = wait_searchable_ms
        self._on_failure = on_failure
        self._spool = spool
        self._current: _Work | None = None  # the request being sent
        self._spooled = 0

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._abandon = threading.Event()
        self._queue: deque[tuple[float, dict[str, Any]]] = deque()
        self._in_flight = 0
        self._next_index = 0
        self._sent = 0
        self._failed = 0
        self._dropped = 0
        self._last_error: ReflexaError | None = None
        self._outcome: dict[str, Any] | None = None
        self._outcome_state: OutcomeState = "none"
        self._created = False
        self._finished = False
        self._closing = False
        self._deadline = float("inf")
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"reflexa-episode-{self._id[:12]}", daemon=True)
        self._thread.start()

    # --- called from the agent's thread -----------------------------------------------------

    def drop_if_full(self) -> bool:
        """Count one step as dropped if the buffer is full; lets the caller skip validating it."""
        if len(self._queue) + self._in_flight < self._max_buffered:  # racy on purpose: the fast path
            return False
        with self._lock:
            if self._finished or self._stopped or self._buffered() < self._max_buffered:
                return False
            self._dropped += 1
            first_drop = self._dropped == 1
        if first_drop:
            self._warn_dropping()
        return True

    @property
    def next_index(self) -> int:
        """The index the next accepted step will get."""
        with self._lock:
            return self._next_index

    def add_step(self, body: dict[str, Any]) -> int | None:
        """Queue a validated step; its index, or ``None`` if the buffer is full."""
        with self._lock:
            if self._finished:
                raise RuntimeError(f"episode {self._id} is finished or closed; no more steps")
            index = self._next_index
            if self._stopped:
                self._next_index += 1
                self._failed += 1  # delivery stopped for good; count the step where it belongs
                return index
            if self._buffered() < self._max_buffered:
                self._next_index += 1
                self._queue.append((time.monotonic(), dict(body, index=index)))
                if len(self._queue) == 1 or len(self._queue) >= self._batch_size:
                    self._wake.notify()
                return index
            self._dropped += 1  # the buffer filled up while the step was being validated
            first_drop = self._dropped == 1
        if first_drop:
            self._warn_dropping()
        return None

    def set_outcome(self, outcome: dict[str, Any]) -> None:
        """The outcome, sent after the last step; no step may follow it."""
        with self._lock:
            if self._finished:
                raise RuntimeError(f"episode {self._id} is already finished or closed")
            self._finished = True
            self._outcome = outcome
            self._outcome_state = "failed" if self._stopped else "pending"
            self._wake.notify()

    def stats(self) -> EpisodeStats:
        with self._lock:
            return EpisodeStats(
                accepted=self._next_index,
                sent=self._sent,
                failed=self._failed,
                dropped=self._dropped,
                outcome=self._outcome_state,
                last_error=self._last_error,
                spooled=self._spooled,
            )

    def close(self, flush_timeout: float) -> bool | None:
        """Send what is left, waiting at most ``flush_timeout`` seconds.

        ``True`` if something was still undelivered at the deadline (it is then
        counted as failed), ``False`` otherwise, ``None`` if already closed.
        """
        with self._lock:
            if self._closing:
                return None
            self._finished = self._closing = True
            self._deadline = time.monotonic() + flush_timeout
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(flush_timeout)
        return self._thread.is_alive() and self._give_up(flush_timeout)

    def _buffered(self) -> int:
        return len(self._queue) + self._in_flight

    def _warn_dropping(self) -> None:
        log.warning(
            "episode %s: buffer of %d steps is full; dropping steps until it drains",
            self._id,
            self._max_buffered,
        )

    def _give_up(self, flush_timeout: float) -> bool:
        """Spool (or, without a spool, count as failed) what is still queued or in
        flight and let the sender thread go; ``True`` if anything was undelivered."""
        with self._lock:
            self._abandon.set()
            undelivered = self._buffered()
            lost = undelivered > 0 or self._outcome_state == "pending"
            if lost:
                self._last_error = ReflexaError(
                    f"not delivered within flush_timeout={flush_timeout}s", type="flush_timeout"
                )
            self._set_aside(self._current)
        return lost

    def _set_aside(self, current: _Work | None) -> None:
        """With the lock held: what was not delivered goes to the spool, in the
        order the server must see it (else it counts as failed)."""
        steps = self._buffered()
        outcome_pending = self._outcome_state == "pending"
        kept_steps, outcome_kept = self._to_spool(current) if self._spool is not None else (0, False)
        self._spooled += kept_steps
        self._failed += steps - kept_steps
        self._queue.clear()
        self._in_flight = 0
        if outcome_pending:
            self._outcome_state = "spooled" if outcome_kept else "failed"

    def _to_spool(self, current: _Work | None) -> tuple[int, bool]:
        """Spool the undelivered requests; (steps kept, outcome kept)."""
        assert self._spool is not None
        works: list[_Work] = []
        created = self._created
        if current is not None:
            works.append(current)
            created = True
        queued = [body for _, body in self._queue]
        for start in range(0, len(queued), self._batch_size):
            works.append(_Work(create=not created, steps=queued[start : start + self._batch_size], outcome=None))
            created = True
        outcome_sent_with = any(w.outcome is not None for w in works)
        if self._outcome_state == "pending" and not outcome_sent_with:
            works.append(_Work(create=not created, steps=[], outcome=self._outcome))
        requests = [SpooledRequest.of(self._spool_operation(w), self._id, len(w.steps)) for w in works]
        if not requests:
            return 0, False
        kept = self._spool.add(requests)
        kept_steps = sum(r.steps for r in requests[:kept])
        outcome_kept = any(w.outcome is not None for w in works[:kept])
        return kept_steps, outcome_kept

    def _spool_operation(self, work: _Work) -> ops.Operation[Any]:
        if not work.create and not work.steps:  # the outcome alone: a replay does not wait
            return ops.report_outcome(self._namespace, self._id, work.outcome or {}, 0)
        return self._operation(work)

    # --- the sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        while (work := self._next_work()) is not None:
            self._deliver(work)

    def _next_work(self) -> _Work | None:
        """Wait until a batch is due: full, old enough, or the episode is ending.
        ``None`` when nothing will ever be due again."""
        # Only the outcome route can wait until the episode is searchable, so an
        # episode that should wait sends its outcome on its own.
        fold = self._wait_searchable_ms == 0
        with self._lock:
            while True:
                if self._abandon.is_set() or self._stopped:
                    return None
                now = time.monotonic()
                if self._queue and (
                    self._finished
                    or len(self._queue) >= self._batch_size
                    or now >= self._queue[0][0] + self._flush_interval
                ):
                    steps = [self._queue.popleft()[1] for _ in range(min(self._batch_size, len(self._queue)))]
                    self._in_flight = len(steps)
                    outcome = None
                    if not self._created and not self._queue and self._outcome_state == "pending" and fold:
                        outcome = self._outcome  # a short episode: one request does it all
                    self._current = _Work(create=not self._created, steps=steps, outcome=outcome)
                    return self._current
                if not self._queue and self._finished:
                    pending = self._outcome if self._outcome_state == "pending" else None
                    if not self._created:
                        self._current = _Work(create=True, steps=[], outcome=pending if fold else None)
                        return self._current
                    if pending is not None:
                        self._current = _Work(create=False, steps=[], outcome=pending)
                        return self._current
                    return None
                self._wake.wait(self._queue[0][0] + self._flush_interval - now if self._queue else None)

    def _operation(self, work: _Work) -> ops.Operation[Any]:
        if work.create:
            body = dict(self._header, steps=work.steps)
            if work.outcome is not None:
                body["outcome"] = work.outcome
            return ops.create_trajectory(self._namespace, body)
        if work.steps:
            return ops.append_steps(self._namespace, self._id, work.steps)
        return ops.report_outcome(self._namespace, self._id, work.outcome or {}, self._wait_ms())

    def _wait_ms(self) -> int:
        """How long the outcome request may wait until the episode is searchable:
        ``wait_searchable_ms``, but short enough for its answer to arrive within
        the flush deadline (``close`` counts a late answer as not delivered)."""
        if self._wait_searchable_ms == 0:
            return 0
        with self._lock:
            deadline = self._deadline
        budget = deadline - time.monotonic() if deadline != float("inf") else self._flush_timeout
        budget -= min(0.5, budget / 5)  # time for the answer to travel back
        return max(0, min(self._wait_searchable_ms, int(budget * 1000)))

    def _not_yet_searchable(self, work: _Work, error: ConsistencyTimeout) -> None:
        """The outcome is stored but the episode was not searchable within the wait.
        A 504 carries no consistency token, so an identical repeat (a replay, no
        wait) fetches it for the client's session: its next retrieve waits instead."""
        with self._lock:
            self._last_error = error
        log.warning("episode %s: stored, but not yet searchable: %s", self._id, error)
        try:
            self._transport.send(ops.report_outcome(self._namespace, self._id, work.outcome or {}))
        except Exception as exc:
            log.debug("episode %s: could not fetch the outcome's consistency token: %s", self._id, exc)

    def _deliver(self, work: _Work) -> None:
        """Send ``work`` until it lands, fails for good, or the flush deadline passes.

        The transport already retried with backoff; this outer loop keeps an episode
        alive through a longer outage (the buffer bounds memory meanwhile).
        """
        pause = _FIRST_PAUSE
        while True:
            try:
                self._transport.send(self._operation(work))
            except ConsistencyTimeout as exc:
                if work.create or work.outcome is None:  # only the outcome request waits
                    error = exc
                else:
                    self._delivered(work)
                    self._not_yet_searchable(work, exc)
                    return
            except ReflexaError as exc:
                error = exc
            except Exception as exc:  # e.g. the client was closed under us: nothing to retry
                error = ReflexaError(f"{type(exc).__name__}: {exc}", type="client_error")
            else:
                self._delivered(work)
                return
            with self._lock:
                remaining = self._deadline - time.monotonic()
                if error.transient and remaining > 0:
                    self._last_error = error
            if not error.transient or remaining <= 0:
                self._stop(work, error)
                return
            log.debug("episode %s: will retry in %.1fs: %s", self._id, min(pause, remaining), error)
            if self._abandon.wait(min(pause, remaining)):
                return
            pause = min(pause * 2, _MAX_PAUSE)

    def _delivered(self, work: _Work) -> None:
        with self._lock:
            if self._abandon.is_set():
                return  # close() already counted this as failed; its stats are final
            self._created = True
            self._sent += len(work.steps)
            self._in_flight = 0
            self._current = None
            if work.outcome is not None:
                self._outcome_state = "sent"

    def _stop(self, work: _Work, error: ReflexaError) -> None:
        """A permanent failure: later steps could not be stored at their indexes, so stop here."""
        with self._lock:
            if self._abandon.is_set():
                return
            self._stopped = True
            self._last_error = error
            if error.transient:  # out of time, not refused: the spool can still deliver it
                self._set_aside(work)
            else:
                self._failed += len(work.steps) + len(self._queue)
                self._queue.clear()
                self._in_flight = 0
                if self._outcome_state == "pending":
                    self._outcome_state = "failed"
            self._current = None
        log.warning("episode %s: delivery stopped: %s", self._id, error)
        self._on_failure(error)
