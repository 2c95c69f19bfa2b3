"""A one-line progress bar for long commands, written to a terminal stream.

Small on purpose (the client depends on httpx and pydantic only). Messages printed
through :meth:`ProgressBar.write` appear above the bar instead of tearing it.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO


class ProgressBar:
    """Progress of ``total`` units, redrawn at most every ``min_interval`` seconds.

    Disabled, it draws nothing and :meth:`write` just prints: the right thing when
    the stream is a log file rather than a terminal.
    """

    def __init__(self, total: int, stream: TextIO, *, enabled: bool, min_interval: float = 0.1) -> None:
        self._total = max(total, 1)
        self._stream = stream
        self._enabled = enabled
        self._min_interval = min_interval
        self._last_draw = float("-inf")
        self._done = 0
        self._label = ""

    def update(self, done: int, label: str) -> None:
        self._done, self._label = done, label
        now = time.monotonic()
        if self._enabled and now - self._last_draw >= self._min_interval:
            self._last_draw = now
            self._draw()

    def write(self, message: str) -> None:
        if self._enabled:
            self._clear()
        print(message, file=self._stream, flush=True)
        if self._enabled:
            self._draw()

    def close(self) -> None:
        """Draw the final state and leave it on its own line."""
        if self._enabled:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()

    def _clear(self) -> None:
        self._stream.write("\r\x1b[2K")

    def _draw(self) -> None:
        fraction = min(self._done / self._total, 1.0)
        columns = shutil.get_terminal_size((80, 20)).columns
        width = max(10, min(40, columns - len(self._label) - 10))
        filled = int(fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        line = f"[{bar}] {fraction:4.0%} {self._label}"
        self._clear()
        self._stream.write(line[: columns - 1])
        self._stream.flush()
