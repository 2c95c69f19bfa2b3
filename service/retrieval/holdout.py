"""Interventional utility: withhold an item from a random share of the retrievals
that would have served it, and compare the outcomes with and without it.

Outcome credit (`ranking.utility`) is correlational: an item served in successful
episodes gains utility whether or not it caused the success. With
`credit.holdout_rate` r > 0, every non-exact item a logged retrieval would serve is
withheld with probability r, decided per (episode, item): all the retrievals of one
episode (`trajectory_id`) withhold the same items, so an episode is either treated
with the item or not (a retrieval without an episode is its own unit). Because the
choice is random, the two arms differ only by the item, and

    effect = P(success | served) - P(success | withheld)

estimates the item's causal effect on success (a randomised controlled holdout,
Kohavi et al. 2009, "Controlled experiments on the web", analysed by intention to
treat: a unit counts in the arm it was assigned, whatever the agent did with it).

Each arm's rate is the posterior mean of a Beta prior of strength `PRIOR_STRENGTH`
centred on the namespace baseline b (the ranking's prior, Gelman et al., BDA3 §2.4):

    p_arm = (s_arm + m b) / (n_arm + m),   var_arm = p_arm (1 - p_arm) / (n_arm + m + 1)
    effect = p_served - p_withheld,         interval = effect ± 1.96 sqrt(var_s + var_w)

Both arms share the prior, so with little support the effect is shrunk toward zero
and the interval is wide; it is called positive or negative only when the interval
excludes zero. docs/retrieval.md, "Causal effect of a memory", states the same.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from service.retrieval.ranking import PRIOR_STRENGTH
from store.retrievals import HoldoutCounts

Z95 = 1.959963984540054


def withheld(namespace: str, unit: str, item_id: str, rate: float) -> bool:
    """Whether `item_id` is withheld from `unit` (an episode or a lone retrieval).

    A hash rather than a random draw: every retrieval of the episode, on any replica,
    decides the same, and a given rate withholds a fixed, uniformly spread share."""
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(f"{namespace}\x00{unit}\x00{item_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < rate


@dataclass(frozen=True)
class Arm:
    units: int  # episodes (or lone retrievals) with a success/failure outcome
    successes: int

    def rate(self, baseline: float) -> float:
        return (self.successes + PRIOR_STRENGTH * baseline) / (self.units + PRIOR_STRENGTH)

    def variance(self, baseline: float) -> float:
        p = self.rate(baseline)
        return p * (1.0 - p) / (self.units + PRIOR_STRENGTH + 1.0)


@dataclass(frozen=True)
class Effect:
    served: Arm
    withheld: Arm
    baseline: float
    effect: float  # shrunk difference of success rates, served minus withheld
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """'helps' / 'hurts' when the 95 % interval excludes zero, else 'unclear'."""
        if self.low > 0.0:
            return "helps"
        if self.high < 0.0:
            return "hurts"
        return "unclear"


def estimate(served: Arm, withheld_arm: Arm, baseline: float) -> Effect:
    diff = served.rate(baseline) - withheld_arm.rate(baseline)
    half = Z95 * math.sqrt(served.variance(baseline) + withheld_arm.variance(baseline))
    return Effect(served, withheld_arm, baseline, diff, max(-1.0, diff - half), min(1.0, diff + half))


def effect_of(counts: HoldoutCounts, baseline: float) -> Effect:
    """The estimate from one item's logged holdout arms."""
    served = Arm(counts.served_units, counts.served_successes)
    return estimate(served, Arm(counts.withheld_units, counts.withheld_successes), baseline)
