"""Token-level signals and their regulators.

token_signal (SEED when the teacher context is memory; on-policy distillation,
Agarwal et al. 2024 and Thinking Machines' "On-Policy Distillation"):

    r_t = log π_T(y_t | teacher ctx) − log π_S(y_t | plain ctx)

direct_opd (Direct-OPD; several shifts compose):

    r_t = Σ_j w_j · (log π_post_j(y_t) − log π_pre_j(y_t))

Regulators, in this order, each optional (masked tokens are 0 throughout):

1. entropy rule (Entropy-Aware On-Policy Distillation, Jin et al. 2026): where the
   teacher's entropy H_t exceeds τ = `entropy_threshold`, the mode-seeking
   single-sample reverse-KL estimate r_t is unstable (many tokens are plausible to the
   teacher). token_signal augments it with the forward KL over the teacher's top-k
   tokens when `teacher_topk` is sent, r_t ← r_t − KL(π_T ‖ π_S); without a top-k
   (and always for direct_opd, whose signal is no KL to the student) it scales r_t
   by τ / H_t;
2. log-scale compression: r ← sign(r)·log(1 + |r|);
3. clipping (REOPOLD): r ← clip(r, low, high), so the bound holds on what is returned.

Then A_t = A + β·R_t with R_t = r_t, or with γ = `discount` > 0 the discounted sum
of the trajectory's later unmasked tokens, R_t = Σ_{t' >= t} γ^(t'−t) r_t' (t'−t
counts unmasked tokens only; with `discount_masked`, every token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.distill.signals.batch import TokenBatch, discounted_future_sum
from service.distill.signals.params import DirectOpdParams, RegulatedSignalParams, TokenSignalParams


@dataclass(frozen=True)
class Signal:
    """A per-token signal before and after regulation (both 0 on masked tokens)."""

    raw: np.ndarray
    value: np.ndarray
    clipped: np.ndarray | None = None  # (N,) bool: clipping changed r_t
    entropy_applied: np.ndarray | None = None  # (N,) bool: the entropy rule applied at t


@dataclass(frozen=True)
class Shaped:
    """What a method returns: per-token advantages (0 on masked tokens) and what
    produced them. Step arrays are per step segment (batch.steps)."""

    advantages: np.ndarray
    outcome: np.ndarray  # (N,) the outcome advantage A per token, as it came in
    signal: Signal | None = None
    step_signal: np.ndarray | None = None  # (S,)
    step_scale: np.ndarray | None = None  # (S,) A'_s / A
    step_clipped: np.ndarray | None = None  # (S,) bool
    flips_prevented: np.ndarray | None = None  # (S,) bool
    agree: np.ndarray | None = None  # (S,) bool
    budget_scaled: np.ndarray | None = None  # (T,) bool


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = np.max(x, axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (top + np.log(np.sum(np.exp(x - top), axis=1, keepdims=True)))[:, 0]


def _renormalised(logprobs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Log-probs renormalised over each row's valid entries (0 elsewhere, where the
    probability is 0: every use weights them by `valid`)."""
    x = np.where(valid, logprobs, -np.inf)
    return np.where(valid, x - _logsumexp(x)[:, None], 0.0)


def topk_entropy(topk: np.ndarray) -> np.ndarray:
    """(N,) entropy of the teacher's top-k distribution renormalised, NaN for rows sent without top-k."""
    valid = ~np.isnan(topk)
    has = valid.any(axis=1)
    out = np.full(len(topk), np.nan)
    if has.any():
        lq = _renormalised(topk[has], valid[has])
        q = np.where(valid[has], np.exp(lq), 0.0)
        out[has] = -np.sum(q * lq, axis=1)
    return out


def forward_kl(topk_teacher: np.ndarray, topk_student: np.ndarray) -> np.ndarray:
    """(M,) KL(π_T ‖ π_S) over the teacher's top-k tokens, both renormalised over them (so >= 0)."""
    valid = ~np.isnan(topk_teacher)
    lq = _renormalised(topk_teacher, valid)
    lp = _renormalised(topk_student, valid)
    q = np.where(valid, np.exp(lq), 0.0)
    kl = np.sum(q * (lq - lp), axis=1)
    return np.maximum(kl, 0.0)


def entropy_rule(
    r: np.ndarray, batch: TokenBatch, threshold: float, *, use_forward_kl: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(r after the rule, tokens where it applied)."""
    entropy = batch.entropy if batch.entropy is not None else np.full(batch.size, np.nan)
    if batch.topk_teacher is not None:
        entropy = np.where(np.isnan(entropy), topk_entropy(batch.topk_teacher), entropy)
    with np.errstate(invalid="ignore"):
        uncertain = batch.mask & (entropy > threshold)
    out = r.copy()
    replaced = np.zeros(batch.size, dtype=bool)
    if use_forward_kl and batch.topk_teacher is not None and batch.topk_student is not None:
        replaced = uncertain & ~np.isnan(batch.topk_teacher).all(axis=1)
        rows = np.flatnonzero(replaced)
        out[rows] = out[rows] - forward_kl(batch.topk_teacher[rows], batch.topk_student[rows])
    down = np.flatnonzero(uncertain & ~replaced)
    out[down] = out[down] * (threshold / entropy[down])
    return out, uncertain


def compress(r: np.ndarray) -> np.ndarray:
    return np.sign(r) * np.log1p(np.abs(r))


def regulate(raw: np.ndarray, batch: TokenBatch, params: RegulatedSignalParams, *, use_forward_kl: bool) -> Signal:
    r = np.where(batch.mask, raw, 0.0)
    applied = None
    if params.entropy_threshold is not None:
        r, applied = entropy_rule(r, batch, params.entropy_threshold, use_forward_kl=use_forward_kl)
    if params.compress:
        r = compress(r)
    clipped = None
    bounds = params.clip_range
    if bounds is not None:
        low, high = bounds
        clipped = batch.mask & ((r < low) | (r > high))
        r = np.clip(r, low, high)
    masked_raw = np.where(batch.mask, raw, 0.0)
    return Signal(raw=masked_raw, value=np.where(batch.mask, r, 0.0), clipped=clipped, entropy_applied=applied)


def future_sum(r: np.ndarray, batch: TokenBatch, gamma: float, *, masked_advance: bool = False) -> np.ndarray:
    """R_t over the unmasked tokens of each trajectory: masked tokens never count, and
    advance t only with `masked_advance` (params.discount_masked, tinker-cookbook's
    convention: its discounted sums run over the whole sequence, masked entries 0)."""
    if gamma == 0:
        return r
    if masked_advance:
        return np.where(batch.mask, discounted_future_sum(np.where(batch.mask, r, 0.0), batch.traj, gamma), 0.0)
    idx = np.flatnonzero(batch.mask)
    out = np.zeros(batch.size)
    out[idx] = discounted_future_sum(r[idx], batch.traj[idx], gamma)
    return out


def _shape(batch: TokenBatch, outcome: np.ndarray, signal: Signal, params: RegulatedSignalParams) -> Shaped:
    total = outcome + params.beta * future_sum(
        signal.value, batch, params.discount, masked_advance=params.discount_masked
    )
    return Shaped(advantages=np.where(batch.mask, total, 0.0), outcome=outcome, signal=signal)


def token_signal(batch: TokenBatch, outcome: np.ndarray, params: TokenSignalParams, teacher: str) -> Shaped:
    assert batch.student is not None
    raw = batch.teacher[teacher] - batch.student
    return _shape(batch, outcome, regulate(raw, batch, params, use_forward_kl=True), params)


def direct_opd(
    batch: TokenBatch, outcome: np.ndarray, params: DirectOpdParams, shifts: Sequence[tuple[str, str, float]]
) -> Shaped:
    raw = np.zeros(batch.size)
    for post, pre, weight in shifts:  # a handful of shifts, each a whole-batch array operation
        raw += weight * (batch.post[post] - batch.pre[pre])
    return _shape(batch, outcome, regulate(raw, batch, params, use_forward_kl=False), params)
