"""Latency statistics: nearest-rank percentiles and the summary every table prints."""

from __future__ import annotations

import math
from dataclasses import dataclass


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 is a latency some request really had)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class Latency:
    n: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float = float("nan")

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        mean = sum(ms) / len(ms) if ms else 0.0
        return cls(len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99), mean, max(ms, default=math.nan))
