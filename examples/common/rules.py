"""The within-episode rules every non-random agent follows, with or without memory.

They use only what happened earlier in the same episode: an action that left the
state unchanged is not tried again in that state, and exploration heads for what
this episode has seen least: an action whose outcome here is unknown, or known to
lead to a rarely visited state, before one that leads back where the agent keeps
returning (no endless open-door / close-door or left / right loops). The
memoryless baseline is exactly these rules, so the only difference the Reflexa
agent has is what it recalls from past episodes.
"""

from __future__ import annotations

import random
from collections import Counter


class EpisodeRules:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._tried: Counter[tuple[str, str]] = Counter()
        self._visits: Counter[str] = Counter()
        self._leads_to: dict[tuple[str, str], str] = {}

    def tried(self, state: str, action: str) -> int:
        return self._tried[(state, action)]

    def observe(self, state: str, action: str, next_state: str) -> None:
        if not self._visits:
            self._visits[state] += 1  # the start state
        self._tried[(state, action)] += 1
        self._visits[next_state] += 1
        self._leads_to[(state, action)] = next_state

    def allowed(self, state: str, actions: tuple[str, ...]) -> list[str]:
        """The actions not known to do nothing here (all of them if every one is)."""
        useful = [a for a in actions if self._leads_to.get((state, a)) != state]
        return useful or list(actions)

    def novelty(self, state: str, action: str) -> tuple[int, int]:
        """Lower is newer: visits of where the action led (0 if unknown), then its tries here."""
        after = self._leads_to.get((state, action))
        return (self._visits[after] if after is not None else 0, self.tried(state, action))

    def explore(self, state: str, actions: list[str]) -> str:
        """The newest action by :meth:`novelty`; ties broken at random."""
        best = min(self.novelty(state, a) for a in actions)
        return self._rng.choice([a for a in actions if self.novelty(state, a) == best])
