"""The retrieval ranking: score = similarity x utility factor x recency factor.

- similarity: cosine of the state match; when the query and the item both carry an
  internal state, the joint `(1 - w) * state + w * internal` (w = ranking.internal_weight).
- utility factor: `1 + utility_weight * 2 * (mean - baseline)`, where `mean` is the
  posterior success rate of the item when served (Beta prior of strength 2 centred
  on the namespace baseline) and `baseline` the namespace's success rate over all
  reported retrievals. An item never credited has mean = baseline, factor 1: it
  ranks on similarity alone. Items that keep failing sink; items that lift success
  above the baseline rise; few observations move them little.
- recency factor: `(1 - recency_weight) + recency_weight * 0.5 ** (age / half_life)`,
  age since the item last changed (a merged exemplar changes when seen again).
Ties break newest first, then by id, so equal inputs give equal outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from domain.settings import RankingSettings

PRIOR_STRENGTH = 2.0


@dataclass(frozen=True)
class Utility:
    mean: float
    std: float
    uses: int
    successes: int
    failures: int
    baseline: float


def utility(successes: int, failures: int, uses: int, baseline: float) -> Utility:
    a = PRIOR_STRENGTH * baseline + successes
    b = PRIOR_STRENGTH * (1.0 - baseline) + failures
    mean = a / (a + b)
    std = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    return Utility(mean, std, uses, successes, failures, baseline)


def baseline_rate(successes: int, total: int) -> float:
    """Laplace-smoothed namespace success rate (0.5 with no data)."""
    return (successes + 1.0) / (total + 2.0)


def joint_similarity(state: float, internal: float | None, weight: float) -> float:
    if internal is None:
        return state
    return (1.0 - weight) * state + weight * internal


def recency_factor(updated_at: datetime, now: datetime, settings: RankingSettings) -> float:
    age_days = max(0.0, (now - updated_at).total_seconds() / 86_400)
    decay = 0.5 ** (age_days / settings.recency_half_life_days)
    return (1.0 - settings.recency_weight) + settings.recency_weight * decay


def score(similarity: float, u: Utility, recency: float, settings: RankingSettings) -> float:
    factor = max(0.0, 1.0 + settings.utility_weight * 2.0 * (u.mean - u.baseline))
    return similarity * factor * recency


def mmr_order(scores: list[float], vectors: np.ndarray, k: int, lam: float) -> list[int]:
    """Maximal marginal relevance: greedily pick the item maximising
    lam * score - (1 - lam) * (max cosine to what is already picked)."""
    chosen: list[int] = []
    remaining = list(range(len(scores)))
    sims = vectors @ vectors.T if len(vectors) else np.zeros((0, 0))
    while remaining and len(chosen) < k:

        def value(i: int) -> float:
            redundancy = max((float(sims[i, j]) for j in chosen), default=0.0)
            return lam * scores[i] - (1.0 - lam) * redundancy

        best = max(remaining, key=lambda i: (value(i), -i))
        chosen.append(best)
        remaining.remove(best)
    return chosen
