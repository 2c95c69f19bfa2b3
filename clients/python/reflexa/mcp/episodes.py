"""The episodes the MCP server keeps open, one per MCP session.

An MCP host calls ``log_step`` once per step of its agent and ``end_episode`` at the
end; between calls the episode lives here, keyed by the session's id (stdio has one
session per process). Each is the client's :class:`~reflexa.episode.Episode`: steps
are queued and sent in the background with the client's idempotent ingest, and what
cannot be delivered within ``flush_timeout`` goes to the client's spool.

An episode nobody touches for ``idle_timeout`` seconds (its session went away) is
closed without an outcome by :meth:`EpisodeBook.reap`: its steps are delivered and the
trajectory stays open, as for any interrupted run. :meth:`EpisodeBook.close_all` does
the same for every episode when the server stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reflexa.client import Client
from reflexa.episode import Episode, EpisodeStats

log = logging.getLogger("reflexa.mcp")


class NoEpisode(LookupError):
    """``end_episode`` in a session without an open episode."""


class TaskRequired(ValueError):
    """The first ``log_step`` of an episode without a ``task``."""


@dataclass
class _Open:
    episode: Episode
    task: str
    touched: float


@dataclass(frozen=True)
class Logged:
    trajectory_id: str
    index: int | None  # None: dropped (the buffer is full)
    started: bool  # this step started the episode


@dataclass(frozen=True)
class Ended:
    trajectory_id: str
    task: str
    stats: EpisodeStats


class EpisodeBook:
    def __init__(
        self,
        client: Client,
        namespace: str,
        *,
        flush_timeout: float,
        idle_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._flush_timeout = flush_timeout
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def current(self, session: str) -> Episode | None:
        with self._lock:
            entry = self._open.get(session)
            return entry.episode if entry else None

    def step(
        self,
        session: str,
        *,
        observation: str,
        action: str,
        task: str | None = None,
        agent: str | None = None,
        environment: str | None = None,
        **step: Any,
    ) -> Logged:
        """Record a step in the session's episode, starting one (which needs ``task``)
        when none is open. Invalid arguments raise :class:`~reflexa.errors.InvalidInput`."""
        with self._lock:
            entry = self._open.get(session)
            started = entry is None
            if entry is None:
                if not task:
                    raise TaskRequired("task")
                episode = self._client.episode(
                    self._namespace,
                    task=task,
                    agent=agent,
                    environment=environment,
                    flush_timeout=self._flush_timeout,
                )
                entry = _Open(episode, task, self._clock())
            try:
                index = entry.episode.step(observation, action, **step)
            except BaseException:
                if started:
                    entry.episode.close()  # nothing was accepted: nothing is sent
                raise
            entry.touched = self._clock()
            self._open[session] = entry
            return Logged(entry.episode.id, index, started)

    def end(
        self,
        session: str,
        *,
        success: bool | None = None,
        reward: float | None = None,
        failure_reason: str | None = None,
    ) -> Ended:
        """Set the outcome and close the episode, waiting at most ``flush_timeout`` for
        delivery (what is not delivered by then is in the spool)."""
        with self._lock:
            entry = self._open.get(session)
            if entry is None:
                raise NoEpisode(session)
            entry.episode.finish(success=success, reward=reward, failure_reason=failure_reason)
            del self._open[session]
        return Ended(entry.episode.id, entry.task, entry.episode.close())

    def reap(self) -> list[str]:
        """Close, without an outcome, the episodes idle for longer than ``idle_timeout``."""
        now = self._clock()
        with self._lock:
            idle = [s for s, e in self._open.items() if now - e.touched > self._idle_timeout]
            entries = [self._open.pop(s) for s in idle]
        for entry in entries:
            log.info("episode %s: idle for %.0f s, closed without an outcome", entry.episode.id, now - entry.touched)
            entry.episode.close()
        return [e.episode.id for e in entries]

    def close_all(self) -> None:
        with self._lock:
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            entry.episode.close()
