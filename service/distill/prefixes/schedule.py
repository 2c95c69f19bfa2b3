"""The prefix-replay schedule (ReOPD): how much of a stored successful trajectory
a trainer replays before its policy takes over, decaying with the trainer's step.

  fraction(step) = max(min_fraction, start_fraction · 2^(−step / half_life_steps))
  prefix_steps(n) = min(n − 1, ⌊fraction · n⌋)

A prefix never holds the whole trajectory (n − 1 at most): the policy always takes
at least the last step itself. ⌊·⌋ allows 1e-9 of float error (0.7 · 10 is
7.000000000000001, 0.3 · 10 · … may land just under an integer).
"""

from __future__ import annotations

import math

FLOOR_SLACK = 1e-9


def fraction(step: int, start_fraction: float, half_life_steps: float, min_fraction: float = 0.0) -> float:
    """The share of a source trajectory's steps replayed at this trainer step."""
    return max(min_fraction, start_fraction * 2.0 ** (-step / half_life_steps))


def prefix_steps(total_steps: int, share: float) -> int:
    """How many of a trajectory's `total_steps` steps a prefix of `share` holds."""
    if total_steps <= 0:
        return 0
    return max(0, min(total_steps - 1, math.floor(share * total_steps + FLOOR_SLACK)))
