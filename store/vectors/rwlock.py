"""A readers-writer lock: many concurrent readers, one writer, writers preferred.

Why: faiss releases the GIL during a search, so searches from a threadpool really
run in parallel — a plain mutex would serialise them for nothing. Mutations of a
faiss index are not safe against a concurrent search, so a writer needs the index
to itself. Writer preference keeps a steady stream of searches from starving the
catch-up writer (new readers wait while a writer is queued).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Shared (read) / exclusive (write) lock; neither side is reentrant."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
