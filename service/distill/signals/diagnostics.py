"""Diagnostics of a batch and of each group: can the trainer trust the signal?

Over unmasked tokens only. S_i is trajectory i's summed token signal (the regulated
r_t of token_signal / direct_opd; the hindsight gap of step_shaping; the mean gap
over horizons of horizon_agreement), L_i its number of unmasked tokens.

- order_consistency (Uni-OPD): over the ordered pairs (i, j) of siblings with
  R_i > R_j, the share with S_i > S_j, a tie S_i = S_j counting one half (the
  Mann-Whitney AUC of the signal against the outcome); null without such a pair;
- length_correlation: Pearson's r of (S_i, L_i) (length exploitation: a signal that
  grows with length rewards rambling); null under 2 trajectories or a constant;
- token_reward: mean, std, min, max and the 1/5/25/50/75/95/99th percentiles
  (numpy's linear interpolation) of r_t, after regulation and (`_raw`) before;
- clipped_tokens_share, entropy_tokens_share: shares of unmasked tokens clipped /
  under the entropy rule; clipped_steps_share: of non-empty steps, |g_s| > α;
- sign_flips: unmasked tokens where A ≠ 0 and the advantage returned has the
  opposite sign (0 for the step methods, by construction); sign_flips_prevented:
  steps that the formula without its guard (clip to ±α; the floor at 0) would
  have flipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.distill.signals.batch import TokenBatch, group_pairs, invariant_sum, segment_sum
from service.distill.signals.token_signal import Shaped

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


def summarize(values: np.ndarray) -> dict[str, float] | None:
    if len(values) == 0:
        return None
    values = np.sort(values)  # sums in value order: the same multiset, the same bits, in any batch order
    cuts = np.percentile(values, PERCENTILES)
    out = {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min())}
    out |= {f"p{p}": float(c) for p, c in zip(PERCENTILES, cuts, strict=True)}
    out["max"] = float(values.max())
    return out


def _share(part: np.ndarray, whole: np.ndarray, seg: np.ndarray | None = None, count: int = 0) -> Any:
    """Share of `whole` that is `part` (booleans): a float, or per segment (NaN where empty)."""
    if seg is None:
        n = int(whole.sum())
        return float((part & whole).sum() / n) if n else None
    n = segment_sum(whole, seg, count)
    return np.divide(segment_sum(part & whole, seg, count), n, out=np.full(count, np.nan), where=n > 0)


def order_consistency(
    reward: np.ndarray, signal: np.ndarray, group: np.ndarray, group_count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group (consistent pairs, pairs), pairs being siblings with different rewards."""
    i, j = group_pairs(group, group_count)
    better = reward[i] > reward[j]
    i, j = i[better], j[better]
    score = (signal[i] > signal[j]) + 0.5 * (signal[i] == signal[j])
    g = group[i]
    return invariant_sum(score, g, group_count), np.bincount(g, minlength=group_count)


def _pearson(x: np.ndarray, y: np.ndarray, seg: np.ndarray, count: int) -> np.ndarray:
    """Per segment Pearson correlation, NaN under 2 members or with a constant side."""
    n = np.bincount(seg, minlength=count).astype(np.float64)
    mx = np.divide(invariant_sum(x, seg, count), n, out=np.zeros(count), where=n > 0)
    my = np.divide(invariant_sum(y, seg, count), n, out=np.zeros(count), where=n > 0)
    dx, dy = x - mx[seg], y - my[seg]
    sxy, sxx, syy = (invariant_sum(v, seg, count) for v in (dx * dy, dx * dx, dy * dy))
    scale_x = invariant_sum(np.abs(x), seg, count)
    scale_y = invariant_sum(np.abs(y), seg, count)
    ok = (n >= 2) & (sxx > (1e-12 * scale_x) ** 2) & (syy > (1e-12 * scale_y) ** 2)
    out = np.full(count, np.nan)
    np.divide(sxy, np.sqrt(sxx * syy), out=out, where=ok)
    return np.clip(out, -1.0, 1.0)


def _num(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def diagnose(batch: TokenBatch, method: str, shaped: Shaped) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(batch diagnostics, one dict per group in request order)."""
    t_count, g_count = batch.trajectory_count, batch.group_count
    mask, traj, steps = batch.mask, batch.traj, batch.steps
    trajectory_group = batch.group
    token_group = trajectory_group[traj]
    lengths = batch.unmasked
    flips = mask & (shaped.outcome != 0) & (np.sign(shaped.advantages) == -np.sign(shaped.outcome))
    out: dict[str, Any] = {
        "method": method,
        "trajectories": t_count,
        "groups": g_count,
        "tokens": int(mask.sum()),
        "steps": int(steps.nonempty.sum()),
        "trainer_advantages": int(batch.own_advantage.sum()) if batch.own_advantage is not None else 0,
        "advantages": summarize(shaped.advantages[mask]),
        "sign_flips": int(flips.sum()),
    }
    per_group: dict[str, Any] = {
        "trajectories": np.bincount(trajectory_group, minlength=g_count),
        "tokens": segment_sum(lengths, trajectory_group, g_count),
        "sign_flips": segment_sum(flips, token_group, g_count),
    }
    size = per_group["trajectories"].astype(np.float64)
    scored = ~np.isnan(batch.reward)  # null rewards (params.null_rewards "trl") count in no reward statistic
    reward = np.where(scored, batch.reward, 0.0)
    n_scored = np.bincount(trajectory_group, weights=scored, minlength=g_count)
    mean_r = np.divide(
        invariant_sum(reward, trajectory_group, g_count), n_scored, out=np.full(g_count, np.nan), where=n_scored > 0
    )
    dev = np.where(scored, reward - np.nan_to_num(mean_r)[trajectory_group], 0.0)
    var_r = invariant_sum(dev**2, trajectory_group, g_count)
    per_group["reward_mean"] = mean_r
    per_group["reward_std"] = np.sqrt(np.divide(var_r, n_scored - 1, out=np.full(g_count, np.nan), where=n_scored > 1))
    if not scored.all():
        out["null_rewards"] = int((~scored).sum())

    signal = shaped.signal
    if signal is not None:
        out["token_reward"] = summarize(signal.value[mask])
        out["token_reward_raw"] = summarize(signal.raw[mask])
        summed = segment_sum(signal.value, traj, t_count)
        consistent, pairs = order_consistency(batch.reward, summed, trajectory_group, g_count)
        out["order_pairs"] = int(pairs.sum())
        out["order_consistency"] = float(consistent.sum() / pairs.sum()) if pairs.sum() else None
        per_group["order_pairs"] = pairs
        per_group["order_consistency"] = np.divide(consistent, pairs, out=np.full(g_count, np.nan), where=pairs > 0)
        out["length_correlation"] = _num(_pearson(summed, lengths, np.zeros(t_count, dtype=np.int64), 1)[0])
        per_group["length_correlation"] = _pearson(summed, lengths, trajectory_group, g_count)
        per_group["signal_mean"] = np.divide(
            invariant_sum(summed, trajectory_group, g_count), size, out=np.full(g_count, np.nan), where=size > 0
        )
        if signal.clipped is not None:
            out["clipped_tokens_share"] = _share(signal.clipped, mask)
            per_group["clipped_tokens_share"] = _share(signal.clipped, mask, token_group, g_count)
        if signal.entropy_applied is not None:
            out["entropy_tokens_share"] = _share(signal.entropy_applied, mask)
    if shaped.step_clipped is not None:
        out["clipped_steps_share"] = _share(shaped.step_clipped, steps.nonempty)
    if shaped.flips_prevented is not None:
        out["sign_flips_prevented"] = int(shaped.flips_prevented.sum())
        per_group["sign_flips_prevented"] = segment_sum(shaped.flips_prevented, trajectory_group[steps.traj], g_count)
    if shaped.budget_scaled is not None:
        out["budget_scaled"] = int(shaped.budget_scaled.sum())
    if shaped.agree is not None:
        out["agreement_share"] = _share(shaped.agree, steps.nonempty)

    groups = []
    for g in range(g_count):  # one small dict per group (not per token)
        row: dict[str, Any] = {}
        for key, values in per_group.items():
            value = float(values[g])
            row[key] = None if np.isnan(value) else (int(value) if key in _COUNTS else value)
        groups.append(row)
    return out, groups


_COUNTS = frozenset({"trajectories", "tokens", "sign_flips", "order_pairs", "sign_flips_prevented"})
