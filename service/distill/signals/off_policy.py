"""Off-policy correction weights and the reference-KL penalty, on any method.

Importance weights (`params.is`), from the inference engine's log-probs of the sampled
tokens (`logprobs.rollout`) and the trainer's (`logprobs.student`):

    ρ_t = exp(log π_S(y_t) − log π_rollout(y_t))                    level token
    ρ_t = exp(mean over the trajectory's unmasked t' of (log π_S − log π_rollout))
                                                                    level sequence (geometric mean, broadcast)
    tis: w_t = min(ρ_t, cap)                                        truncated IS (Yao et al. 2025)
    mis: w_t = ρ_t if low <= ρ_t <= high, else 0                    masked IS (Liu, Li et al. 2025)

w_t = 0 on masked tokens. The exponent is bounded to ±20 before exp (verl's
rollout_corr_helper SAFETY_BOUND), so nothing overflows. An in-range MIS weight is ρ_t,
not 1: verl composes its rejection mask (rollout_rs) with the IS weights (rollout_is), so
a kept token carries its ratio; a trainer that wants the mask alone reads w_t > 0.
The mismatch diagnostic is verl's k3 estimate of KL(π_rollout ‖ π_S) over unmasked
tokens: mean of exp(δ) − δ − 1, δ = log π_S − log π_rollout (compute_offpolicy_metrics).

Reference KL (`params.kl`), d_t = log π_S(y_t) − log π_ref(y_t) (Schulman 2020,
"Approximating KL divergence", samples from π_S):

    k1 = d,  k2 = d²/2,  k3 = exp(−d) − 1 + d   (−d bounded to ±20 before exp, as verl's k3)
    centered: kl_t − mean of kl over the batch's unmasked tokens (tinker-cookbook's
              incorporate_kl_penalty adds coef·(mean d − d_t) to the advantages)
    advantages_t −= coef · kl_t                 (unmasked tokens only)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.distill.signals.batch import TokenBatch, invariant_sum, segment_mean
from service.distill.signals.params import SAFETY_BOUND, IsParams, KlParams


@dataclass(frozen=True)
class Weights:
    weights: np.ndarray  # (N,) w_t, 0 on masked tokens
    diagnostics: dict[str, Any]


def _exp(x: np.ndarray) -> np.ndarray:
    return np.exp(np.clip(x, -SAFETY_BOUND, SAFETY_BOUND))


def _mean(values: np.ndarray) -> float | None:
    """The mean, added in the order of the values (the same multiset: the same bits)."""
    if len(values) == 0:
        return None
    return float(np.sort(values).sum() / len(values))


def is_weights(batch: TokenBatch, params: IsParams) -> Weights:
    assert batch.student is not None and batch.rollout is not None
    mask = batch.mask
    delta = np.where(mask, batch.student - batch.rollout, 0.0)
    if params.level == "sequence":
        seq = segment_mean(delta, mask.astype(np.float64), batch.traj, batch.trajectory_count)
        log_ratio = seq[batch.traj]
    else:
        log_ratio = delta
    ratio = _exp(log_ratio)
    counted = ratio[mask]
    diagnostics: dict[str, Any] = {
        "is_max_ratio": float(counted.max()) if len(counted) else None,
        "mismatch_kl": _mean((_exp(delta) - delta - 1.0)[mask]),
        "is_truncated_share": None,
        "is_masked_share": None,
    }
    if params.mode == "tis":
        assert params.cap is not None
        weights = np.minimum(ratio, params.cap)
        changed = mask & (ratio > params.cap)
        diagnostics["is_truncated_share"] = float(changed.sum() / mask.sum()) if mask.any() else None
    else:
        assert params.low is not None and params.high is not None
        with np.errstate(divide="ignore"):
            lo, hi = np.log(params.low), np.log(params.high)
        keep = (log_ratio >= lo) & (log_ratio <= hi)  # in log space: the bound is exact, unclamped
        weights = np.where(keep, ratio, 0.0)
        dropped = mask & ~keep
        diagnostics["is_masked_share"] = float(dropped.sum() / mask.sum()) if mask.any() else None
    return Weights(weights=np.where(mask, weights, 0.0), diagnostics=diagnostics)


def kl_estimate(d: np.ndarray, estimator: str) -> np.ndarray:
    if estimator == "k1":
        return d.copy()
    if estimator == "k2":
        return 0.5 * d * d
    bounded = np.clip(-d, -SAFETY_BOUND, SAFETY_BOUND)
    return np.exp(bounded) - 1.0 - bounded


def kl_penalty(batch: TokenBatch, params: KlParams) -> tuple[np.ndarray, dict[str, Any]]:
    """(per-token kl_t as subtracted (centred when asked), 0 on masked tokens; diagnostics)."""
    assert batch.student is not None and batch.ref is not None
    mask = batch.mask
    d = np.where(mask, batch.student - batch.ref, 0.0)
    kl = np.where(mask, kl_estimate(d, params.estimator), 0.0)
    count = int(mask.sum())
    mean = None
    if count:
        mean = float(invariant_sum(kl[mask], np.zeros(count, dtype=np.int64), 1)[0] / count)
    term = kl - mean if params.centered and mean is not None else kl
    return np.where(mask, term, 0.0), {"kl_mean": mean}
