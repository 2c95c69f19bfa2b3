"""What the suites' reports share: the facts a report records of its run first, the
opening lines of every suite's markdown section (title, reproducing command, machine),
and the summary a suite prints of its verdicts."""

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
