"""A one-line progress bar on stderr (redrawn in place on a terminal, silent otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._start = time.monotonic()

    def advance(self, label: str = "") -> None:
        self.done += 1
        if not self._tty:
            return
        width = 30
        filled = round(width * self.done / self.total)
        elapsed = time.monotonic() - self._start
        bar = "#" * filled + "-" * (width - filled)
        self._stream.write(f"\r[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {label[:40]:<40}")
        self._stream.flush()

    def close(self) -> None:
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()
