"""The retrieval log's journal: a process appends a retrieve's log records to its own
file before the answer is sent and marks them done once they are in the database,
so a process killed between the two loses nothing (a later process on the host
replays the file). Files, not tables: one `write(2)` per retrieve instead of a
database transaction on the request path.

Each process writes its own segment files (`<pid>-<random>.jsonl`) under one
directory per database, and holds an exclusive `flock` on each for as long as it
lives: a file nobody holds belonged to a process that is gone. A segment is
truncated whenever nothing in it is pending, and a full one (`SEGMENT_BYTES`) is
replaced by a new one and removed once its last record is done.

What survives: a killed process (the kernel has the bytes). Not a power loss before
the page cache is written back, the same as SQLite's `synchronous=NORMAL` in WAL mode.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SEGMENT_BYTES = 1 << 20


@dataclass
class _Segment:
    path: Path
    fd: int
    pending: int = 0
    size: int = 0


@dataclass(frozen=True)
class Ticket:
    """What `Journal.append` wrote: `count` records in one segment."""

    segment: _Segment
    count: int


class Journal:
    """This process's journal files in `directory` (thread-safe)."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending = 0
        self._segment = self._new_segment()

    def _new_segment(self) -> _Segment:
        path = self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else holds it
        return _Segment(path, fd)

    def append(self, records: list[dict[str, Any]]) -> Ticket:
        """Write the records (one JSON object a line) in one `write(2)`."""
        data = b"".join(orjson.dumps(r) + b"\n" for r in records)
        with self._lock:
            segment = self._segment
            os.write(segment.fd, data)
            segment.pending += len(records)
            self._pending += len(records)
            segment.size += len(data)
            if segment.size >= self.segment_bytes:
                self._segment = self._new_segment()
        return Ticket(segment, len(records))

    def done(self, ticket: Ticket) -> None:
        """The ticket's records are in the database: forget them once nothing else in
        their segment is pending."""
        with self._lock:
            segment = ticket.segment
            segment.pending -= ticket.count
            self._pending -= ticket.count
            if segment.pending > 0:
                return
            if segment is self._segment:
                os.ftruncate(segment.fd, 0)
                segment.size = 0
            else:
                segment.path.unlink(missing_ok=True)
                os.close(segment.fd)

    @property
    def pending(self) -> int:
        """Records of this process not yet marked done."""
        with self._lock:
            return self._pending


def read_records(path: Path) -> list[dict[str, Any]]:
    """A journal file's whole records; a line cut short by a crash (or being written
    right now by its owner) is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def scan(directory: Path, needle: bytes) -> list[dict[str, Any]]:
    """Every whole record in the directory's journal files (any process's) of a file
    that contains `needle`; a file without it is not parsed."""
    found: list[dict[str, Any]] = []
    for path in directory.glob("*.jsonl"):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # done and removed meanwhile
            continue
        if needle in data:
            found.extend(read_records(path))
    return found


@dataclass
class Orphan:
    """A journal file whose process is gone, held (locked) by this one until it is
    replayed and `remove`d."""

    path: Path
    fd: int
    records: list[dict[str, Any]]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        os.close(self.fd)

    def release(self) -> None:
        """Leave the file for a later replay."""
        os.close(self.fd)


def orphans(directory: Path) -> Iterator[Orphan]:
    """The journal files no live process holds, each locked while the caller replays
    it. The caller must `remove` or `release` each one."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("*.jsonl")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its process is alive (or another one is replaying it)
            os.close(fd)
            continue
        if not path.exists():  # replayed and removed between our open and our lock
            os.close(fd)
            continue
        yield Orphan(path, fd, read_records(path))
