"""A dataset export written to a file as it streams in.

The bytes go to ``<path>.part``, renamed over ``<path>`` only once the answer is
complete, so a failed or interrupted export never leaves a file that looks whole.
Progress is counted in rows for JSON lines (one per line) and in bytes for
parquet, shown with a tqdm bar when tqdm is installed (``pip install
reflexa[progress]``; the client itself needs only httpx and pydantic).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType
from typing import IO, Any


def _progress_bar(unit: str, total: int | None, description: str) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # no bar without tqdm
        return None
    scale = unit == "B"
    return tqdm(total=total, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000, desc=description)


class DatasetFile:
    """A :class:`~reflexa._transport.ByteSink` into ``path``; use it as a context
    manager and call :meth:`finish` once the stream has ended."""

    def __init__(
        self, path: str | os.PathLike[str], format: str, *, progress: bool, total: int | None, description: str
    ) -> None:
        self.path = Path(path)
        self.part = self.path.with_name(self.path.name + ".part")
        self.count_rows = format == "jsonl"
        #: Rows written (JSON lines) or bytes written (parquet).
        self.count = 0
        self._file: IO[bytes] | None = None
        self._bar = _progress_bar("rows" if self.count_rows else "B", total, description) if progress else None

    def __enter__(self) -> DatasetFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if exc_type is not None:
            with contextlib.suppress(OSError):
                self.part.unlink()
        if self._bar is not None:
            self._bar.close()

    def restart(self) -> None:
        if self._file is not None:
            self._file.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.part, "wb")  # noqa: SIM115 - closed by finish() or __exit__
        self.count = 0
        if self._bar is not None:
            self._bar.reset()

    def write(self, chunk: bytes) -> None:
        assert self._file is not None, "restart() opens the file"
        self._file.write(chunk)
        n = chunk.count(b"\n") if self.count_rows else len(chunk)
        self.count += n
        if self._bar is not None:
            self._bar.update(n)

    def finish(self) -> int:
        """Move the complete file into place; returns the row or byte count."""
        assert self._file is not None, "restart() opens the file"
        self._file.close()
        self._file = None
        os.replace(self.part, self.path)
        return self.count
