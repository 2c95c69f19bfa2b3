"""A local spool for episode requests the server did not take in time.

When an episode cannot be delivered within its ``flush_timeout`` (the server is
down, the network is out), its undelivered requests — the trajectory's creation
with its first steps, the appends with their step indexes, the outcome — are kept
here, one JSON line each, in the order the server must see them. Every one of them
is idempotent on the server (the trajectory id and step indexes are the client's),
so replaying them later, or twice, stores each step exactly once.

The file is bounded (``max_bytes``): requests that do not fit are refused and their
steps counted as failed, as without a spool. Writers and the replayer take a file
lock, so threads and processes sharing a path do not interleave; still, give each
process its own path (``REFLEXA_SPOOL_PATH``), as a replay sends what it finds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflexa import _operations as ops
from reflexa.errors import ReflexaError

log = logging.getLogger("reflexa.spool")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SpooledRequest:
    method: str
    path: str
    body: dict[str, Any] | None
    trajectory_id: str
    steps: int  # steps this request carries

    def line(self) -> bytes:
        record = {
            "method": self.method,
            "path": self.path,
            "body": self.body,
            "trajectory_id": self.trajectory_id,
            "steps": self.steps,
            "spooled_at": time.time(),
        }
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

    @classmethod
    def of(cls, op: ops.Operation[Any], trajectory_id: str, steps: int) -> SpooledRequest:
        return cls(op.method, op.path, op.body, trajectory_id, steps)


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did: requests (and their steps) the server took, requests it
    refused for good (dropped, with a warning), and requests still waiting."""

    sent: int
    sent_steps: int
    dropped: int
    left: int
    last_error: ReflexaError | None = None


class Spool:
    def __init__(self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # flock is per process: threads need their own lock

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def add(self, requests: list[SpooledRequest]) -> int:
        """Append requests in order; returns how many fit. A request that does not
        fit is refused with every one after it (they would not apply without it)."""
        lines = [r.line() for r in requests]
        with self._locked():
            size = self.path.stat().st_size if self.path.exists() else 0
            kept = 0
            for line in lines:
                if size + len(line) > self.max_bytes:
                    break
                size += len(line)
                kept += 1
            if kept:
                with open(self.path, "ab") as out:
                    out.write(b"".join(lines[:kept]))
                    out.flush()
                    os.fsync(out.fileno())
        if kept < len(lines):
            log.warning(
                "spool %s is full (%d bytes): %d requests not kept", self.path, self.max_bytes, len(lines) - kept
            )
        return kept

    def pending(self) -> int:
        """Requests waiting in the spool."""
        with self._locked():
            return len(self._read())

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_bytes().splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:  # a torn last line from a crash mid-write: it was never acknowledged
                log.warning("spool %s: skipping an unreadable line", self.path)
        return out

    def _write(self, records: list[dict[str, Any]]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as out:
            for record in records:
                out.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def replay(self, transport: Any) -> ReplayReport:
        """Send what is spooled, in order, through ``transport`` (a client's). Stops
        at the first transient failure (the server is still away: the rest waits for
        the next replay); a permanent refusal drops that request with a warning."""
        with self._locked():
            records = self._read()
            sent = sent_steps = dropped = 0
            last_error: ReflexaError | None = None
            done = 0
            for record in records:
                op: ops.Operation[Any] = ops.Operation(
                    record["method"], record["path"], _anything, body=record["body"], retry="idempotent"
                )
                try:
                    transport.send(op)
                except ReflexaError as exc:
                    last_error = exc
                    if exc.transient:
                        break
                    dropped += 1
                    log.warning(
                        "spool %s: the server refused a spooled %s %s for trajectory %s: %s",
                        self.path,
                        record["method"],
                        record["path"],
                        record["trajectory_id"],
                        exc,
                    )
                else:
                    sent += 1
                    sent_steps += int(record.get("steps", 0))
                done += 1
            if done:
                self._write(records[done:])
            return ReplayReport(sent, sent_steps, dropped, len(records) - done, last_error)


def _anything(value: Any) -> Any:
    return value


class SpoolReplayer:
    """Replays a spool in a background thread, one replay at a time (the agent never
    waits for it): at client start, and after an episode was delivered."""

    def __init__(self, spool: Spool, transport: Any) -> None:
        self.spool = spool
        self._transport = transport
        self._running = threading.Lock()
        self.last: ReplayReport | None = None

    def kick(self) -> None:
        if not self.spool.path.exists() or self.spool.path.stat().st_size == 0:
            return
        if not self._running.acquire(blocking=False):
            return  # one is running; it sends what is there

        def run() -> None:
            try:
                self.last = self.spool.replay(self._transport)
            except Exception as exc:  # e.g. the client closed under us; the spool keeps its lines
                log.debug("spool %s: replay stopped: %s", self.spool.path, exc)
            finally:
                self._running.release()

        threading.Thread(target=run, name="reflexa-spool-replay", daemon=True).start()
