"""Learning curves: success rate and episode length per block of episodes, then mean
and spread (sample standard deviation) across independent runs (seeds)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from examples.common.agents import EpisodeResult


@dataclass(frozen=True)
class Point:
    mean: float
    std: float  # across runs; 0 with a single run


@dataclass(frozen=True)
class Curve:
    agent: str
    block: int
    success: list[Point]  # one per block
    steps: list[Point]
    score: list[Point]  # reward per episode (the game's score for TextWorldExpress)
    runs: int

    @property
    def last(self) -> Point:
        return self.success[-1]


def _point(values: Sequence[float]) -> Point:
    return Point(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


def blocks(results: Sequence[EpisodeResult], size: int) -> list[list[EpisodeResult]]:
    return [list(results[i : i + size]) for i in range(0, len(results), size)]


def curve(agent: str, runs: Sequence[Sequence[EpisodeResult]], block: int) -> Curve:
    """``runs``: one list of episode results per seed, all of the same length."""
    per_run = [blocks(r, block) for r in runs]
    n_blocks = min(len(b) for b in per_run)
    success, steps, score = [], [], []
    for i in range(n_blocks):
        success.append(_point([statistics.fmean(e.success for e in b[i]) for b in per_run]))
        steps.append(_point([statistics.fmean(e.steps for e in b[i]) for b in per_run]))
        score.append(_point([statistics.fmean(e.reward for e in b[i]) for b in per_run]))
    return Curve(agent, block, success, steps, score, len(runs))


def table(curves: Sequence[Curve]) -> str:
    """A markdown table: one row per block, success, steps and score per agent as mean ± std."""
    header = "| episodes | " + " | ".join(f"{c.agent} success | steps | score" for c in curves) + " |"
    rule = "|---" * (1 + 3 * len(curves)) + "|"
    rows = [header, rule]
    block = curves[0].block
    for i in range(len(curves[0].success)):
        cells = [f"{i * block + 1}-{(i + 1) * block}"]
        for c in curves:
            cells.append(f"{c.success[i].mean:.2f} ± {c.success[i].std:.2f}")
            cells.append(f"{c.steps[i].mean:.1f} ± {c.steps[i].std:.1f}")
            cells.append(f"{c.score[i].mean:.2f} ± {c.score[i].std:.2f}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def text_curve(curves: Sequence[Curve], bar: int = 20) -> str:
    """Success per block for each agent, as numbers and bars, for a terminal."""
    block = curves[0].block
    lines = ["episodes  " + "".join(f"{c.agent:<{bar + 7}}" for c in curves)]
    for i in range(len(curves[0].success)):
        row = f"{f'{i * block + 1}-{(i + 1) * block}':<10}"
        for c in curves:
            p = c.success[i]
            row += f"{p.mean:4.2f} {'#' * round(p.mean * bar):<{bar}}  "
        lines.append(row.rstrip())
    return "\n".join(lines)
