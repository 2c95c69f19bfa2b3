"""Step-level shaping of the outcome advantage A from hindsight gaps. A step's value
applies to every one of its unmasked tokens; masked tokens get 0.

step_shaping (StepOPSD): with the hindsight gap per token r_t = log π_T(y_t | hindsight
ctx) − log π_S(y_t | plain ctx) and g_s its mean over the step's unmasked tokens,

    d_s  = λ · clip(g_s, −α, α)                       |d_s| <= λα < 1
    d_s ← d_s · min(1, budget / Σ_s' |d_s'|)          per trajectory (the credit budget)
    A'_t = A_t · (1 + d_s(t))                          sign_aware: A_t · (1 + sign(A_t)·d_s(t))

so 1 + d_s > 0 and the sign of A is never flipped; Σ_s |A'_s − A| <= budget·|A|.

horizon_agreement (TurnSight): with g^h_s the step gap under each hindsight horizon h,

    g_s  = mean_h g^h_s  where every g^h_s has the same strict sign, else no signal
    z_s  = (g_s − μ_G) / (σ_G + eps)   μ_G, σ_G: mean and population std of g over the
                                       agreeing steps of all trajectories of the group
    A'_t = A_t · max(0, 1 + β·z_s(t))  (sign_aware: β·sign(A_t)·z) — modulates, never flips;

steps without agreement (or without unmasked tokens) keep z = 0, i.e. A unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.distill.signals.batch import TokenBatch, invariant_sum, segment_mean, segment_sum
from service.distill.signals.params import HorizonAgreementParams, StepShapingParams
from service.distill.signals.token_signal import Shaped, Signal


def _gap(batch: TokenBatch, teacher: str) -> np.ndarray:
    assert batch.student is not None
    return np.where(batch.mask, batch.teacher[teacher] - batch.student, 0.0)


def _step_sign(batch: TokenBatch, outcome: np.ndarray) -> np.ndarray:
    """(S,) the sign of A over each step (of its mean over the unmasked tokens)."""
    steps = batch.steps
    return np.sign(segment_mean(outcome, batch.mask.astype(np.float64), steps.seg, steps.count))


def step_shaping(batch: TokenBatch, outcome: np.ndarray, params: StepShapingParams, teacher: str) -> Shaped:
    steps = batch.steps
    mask = batch.mask.astype(np.float64)
    raw = _gap(batch, teacher)
    g = segment_mean(raw, mask, steps.seg, steps.count)
    d = params.lambda_ * np.clip(g, -params.alpha, params.alpha)
    budget_scaled = None
    if params.budget is not None:
        spent = segment_sum(np.abs(d), steps.traj, batch.trajectory_count)
        budget_scaled = spent > params.budget
        scale = np.divide(params.budget, spent, out=np.ones_like(spent), where=budget_scaled)
        d = d * scale[steps.traj]
    sign = np.sign(outcome) if params.sign_aware else np.ones(batch.size)
    d_tok = d[steps.seg]
    advantages = np.where(batch.mask, outcome * (1.0 + sign * d_tok), 0.0)
    would_flip = batch.mask & (outcome != 0) & (1.0 + sign * params.lambda_ * g[steps.seg] <= 0)
    step_sign = _step_sign(batch, outcome) if params.sign_aware else np.ones(steps.count)
    return Shaped(
        advantages=advantages,
        outcome=outcome,
        signal=Signal(raw=raw, value=raw),
        step_signal=g,
        step_scale=1.0 + step_sign * d,
        step_clipped=steps.nonempty & (np.abs(g) > params.alpha),
        flips_prevented=segment_sum(would_flip, steps.seg, steps.count) > 0,
        budget_scaled=budget_scaled,
    )


def horizon_agreement(
    batch: TokenBatch, outcome: np.ndarray, params: HorizonAgreementParams, horizons: Sequence[str]
) -> Shaped:
    steps = batch.steps
    mask = batch.mask.astype(np.float64)
    raws = np.stack([_gap(batch, h) for h in horizons])  # (H, N): a few horizons, each a whole-batch operation
    gaps = np.stack([segment_mean(raw, mask, steps.seg, steps.count) for raw in raws])  # (H, S)
    agree = steps.nonempty & ((gaps > 0).all(axis=0) | (gaps < 0).all(axis=0))
    g = np.where(agree, gaps.mean(axis=0), 0.0)
    group = batch.group[steps.traj]
    counted = agree.astype(np.float64)
    n = segment_sum(counted, group, batch.group_count)
    mean = np.divide(invariant_sum(g * counted, group, batch.group_count), n, out=np.zeros_like(n), where=n > 0)
    centred = np.where(agree, g - mean[group], 0.0)
    std = np.sqrt(np.divide(invariant_sum(centred**2, group, batch.group_count), n, out=np.zeros_like(n), where=n > 0))
    z = np.where(agree, centred / (std[group] + params.eps), 0.0)
    sign = np.sign(outcome) if params.sign_aware else np.ones(batch.size)
    modulation = 1.0 + params.beta * sign * z[steps.seg]
    advantages = np.where(batch.mask, outcome * np.maximum(0.0, modulation), 0.0)
    would_flip = batch.mask & (outcome != 0) & (modulation < 0)
    step_sign = _step_sign(batch, outcome) if params.sign_aware else np.ones(steps.count)
    raw = raws.mean(axis=0)
    return Shaped(
        advantages=advantages,
        outcome=outcome,
        signal=Signal(raw=raw, value=raw),
        step_signal=z,
        step_scale=np.maximum(0.0, 1.0 + params.beta * step_sign * z),
        flips_prevented=segment_sum(would_flip, steps.seg, steps.count) > 0,
        agree=agree,
    )
