"""The within-episode rules every non-random agent follows, with or without memory.

They use only what happened earlier in the same episode: an action that left the
state unchanged is not tried again in that state, and among the rest the least
tried action is explored first. The memoryless baseline is exactly these rules, so
the only difference the Reflexa agent has is what it recalls from past episodes.
"""

from __future__ import annotations

import random
from collections import Counter


class EpisodeRules:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._tried: Counter[tuple[str, str]] = Counter()
        self._no_ops: set[tuple[str, str]] = set()

    def tried(self, state: str, action: str) -> int:
        return self._tried[(state, action)]

    def observe(self, state: str, action: str, next_state: str) -> None:
        self._tried[(state, action)] += 1
        if next_state == state:
            self._no_ops.add((state, action))

    def allowed(self, state: str, actions: tuple[str, ...]) -> list[str]:
        """The actions not known to do nothing here (all of them if every one is)."""
        useful = [a for a in actions if (state, a) not in self._no_ops]
        return useful or list(actions)

    def explore(self, state: str, actions: list[str]) -> str:
        """The least tried action in this state; ties broken at random."""
        fewest = min(self.tried(state, a) for a in actions)
        return self._rng.choice([a for a in actions if self.tried(state, a) == fewest])
