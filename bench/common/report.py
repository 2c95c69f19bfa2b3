"""What the suites' reports share: the facts a report records of its run first, the
opening lines of every suite's markdown section (title, reproducing command, machine),
its tables, and the summary a suite prints of its verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from bench.common.machine import MachineFacts


@dataclass
class RunFacts:
    """The fields a suite's report starts with, in this order (the JSON results keep
    it): the command that reproduces the run, whether it was `--quick` or `--smoke`,
    the config (asdict) and the machine."""

    command: str
    small: bool
    config: dict[str, Any]
    machine: MachineFacts


class TimedRun(Protocol):
    """What a section's opening reads of a report (every suite's report has these)."""

    command: str
    wall_s: float
    machine: MachineFacts


def opening(title: str, run: TimedRun, sizes: str, more: str = "") -> list[str]:
    """A section's first lines: its title, how to reproduce the run and how long it took
    (`sizes` says what the smaller runs are; `more` follows that sentence), then the
    machine's facts."""
    return [
        f"## {title}",
        "",
        f"Reproduce: `{run.command}` (this run took {run.wall_s / 60:.1f} min; {sizes}).{more}",
        "",
        run.machine.markdown(),
    ]


def summary(suite: str, verdicts: list[str]) -> str:
    """What a suite prints when it is done: its verdicts under its name."""
    return "\n".join([f"bench.{suite}:", *verdicts])


class Table:
    """A markdown table, written row by row: the header's cells and each row's are
    separated by `|` (the outer bars are added); `align` has a letter a column, `l`
    (left) or `r` (right, the numbers). A row with another number of cells than the
    header is refused here rather than rendered ragged."""

    def __init__(self, header: str, align: str) -> None:
        self.columns = header.count("|") + 1
        if len(align) != self.columns or not set(align) <= {"l", "r"}:
            raise ValueError(f"align {align!r} for {self.columns} columns: {header}")
        self.lines = [f"| {header} |", "|" + "".join("---:|" if a == "r" else "---|" for a in align)]

    def row(self, cells: str) -> None:
        if cells.count("|") + 1 != self.columns:
            raise ValueError(f"{cells.count('|') + 1} cells for {self.columns} columns: {cells}")
        self.lines.append(f"| {cells} |")
