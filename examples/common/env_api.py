"""What an agent sees of an environment: text, a subgoal, the valid actions.

Every environment module adapts its game to :class:`TextEnv`, so the agents, the
runner and the test never know which game they play. Worlds are numbered by the
environment's own seeds and each seed belongs to exactly one split (train, dev,
test); :class:`SeedSplits` refuses a seed outside the split asked for, because a
silently substituted world would corrupt a "never seen" measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Observation:
    text: str  # the state as the agent indexes and retrieves it
    subgoal: str  # the agent's internal state (what it is trying to do now)
    actions: tuple[str, ...]  # the actions valid now
    # What an agent can keep track of by itself within the episode (e.g. dead
    # reckoning from its own moves) when the observation alone repeats across places.
    tracking: str = ""


@dataclass(frozen=True)
class Transition:
    observation: Observation
    result: str  # what the environment said about the action
    reward: float
    done: bool  # the episode ended (success, failure or time limit)
    success: bool
    truncated: bool = False  # ended by the step limit
    caused_failure: bool = False  # this action lost the game (not merely the last step)


class TextEnv(Protocol):
    name: str  # one label per environment family, so exemplars of all its worlds merge by state
    max_steps: int
    splits: SeedSplits

    @property
    def task(self) -> str: ...

    def reset(self, world: int, split: str) -> Observation: ...

    def step(self, action: str) -> Transition: ...

    def close(self) -> None: ...


class SeedSplits:
    """Disjoint seed ranges per split; :meth:`check` raises on a seed outside its split."""

    def __init__(self, **ranges: range) -> None:
        if set(ranges) != set(SPLITS):
            raise ValueError(f"need exactly the splits {SPLITS}, got {sorted(ranges)}")
        spans = sorted((r.start, r.stop) for r in ranges.values())
        for (_, stop), (start, _) in zip(spans, spans[1:], strict=False):
            if start < stop:
                raise ValueError(f"seed ranges overlap: {ranges}")
        self.ranges = ranges

    def check(self, split: str, seed: int) -> None:
        if split not in self.ranges:
            raise ValueError(f"unknown split {split!r}; one of {SPLITS}")
        if seed not in self.ranges[split]:
            raise ValueError(f"seed {seed} is not in the {split} split {self.ranges[split]}")

    def seeds(self, split: str) -> range:
        self.check(split, self.ranges[split].start)
        return self.ranges[split]
