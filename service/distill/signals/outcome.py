"""The outcome advantage A of each trajectory: the trainer's own `advantages` when it
sends them, else group-relative (GRPO, Shao et al. 2024 "DeepSeekMath"):

    A_i = (R_i − mean_G R) / (std_G R + eps)      std = true  (std: sample std, ddof 1,
    A_i =  R_i − mean_G R                          std = false  as torch.std in verl/TRL)

A group of one has no siblings to be relative to: refused for every trajectory
whose A would come from it.
"""

from __future__ import annotations

import numpy as np

from domain.errors import InvalidInput
from service.distill.signals.batch import TokenBatch, invariant_sum


def grpo(reward: np.ndarray, group: np.ndarray, group_count: int, *, std: bool, eps: float) -> np.ndarray:
    """(T,) group-relative advantages; groups of one give NaN (the caller refuses them)."""
    size = np.bincount(group, minlength=group_count).astype(np.float64)
    mean = np.divide(invariant_sum(reward, group, group_count), size, out=np.zeros(group_count), where=size > 0)
    centred = reward - mean[group]
    if not std:
        return np.where(size[group] > 1, centred, np.nan)
    var = np.divide(
        invariant_sum(centred**2, group, group_count), size - 1, out=np.full(group_count, np.nan), where=size > 1
    )
    return centred / (np.sqrt(var)[group] + eps)


def require_siblings(batch: TokenBatch, needed: np.ndarray, method: str) -> None:
    """Refuse the first group (in request order) of one trajectory among those that need siblings."""
    size = np.bincount(batch.group, minlength=batch.group_count)
    lonely = np.flatnonzero((size == 1) & (np.bincount(batch.group, weights=needed, minlength=batch.group_count) > 0))
    if len(lonely):
        g = int(lonely[0])
        if method == "horizon_agreement":
            why = "horizon_agreement normalises the step signal across sibling rollouts"
        else:
            why = "the outcome advantage A is group-relative (GRPO): send `advantages` for it, or its siblings"
        raise InvalidInput(
            f"groups[{g}] has one trajectory; {why} (at least 2 per group)",
            field=f"groups[{g}].trajectories",
            rule="group_size",
        )


def outcome_advantages(
    batch: TokenBatch, *, std: bool, eps: float, method: str, use: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(per-token A (N,), per-trajectory scalar A (T,)). The scalar is NaN where the
    trainer sent a per-token list (its A need not be constant). Masked tokens are not
    touched here (each method zeroes them)."""
    t_count = batch.trajectory_count
    if not use:
        return np.zeros(batch.size), np.zeros(t_count)
    own = batch.own_advantage if batch.own_advantage is not None else np.zeros(t_count, dtype=bool)
    require_siblings(batch, ~own, method)
    scalar = grpo(batch.reward, batch.group, batch.group_count, std=std, eps=eps)
    if batch.scalar_advantage is not None:
        scalar = np.where(own, batch.scalar_advantage, scalar)
    per_token = scalar[batch.traj]
    if batch.advantages is not None:
        per_token = np.where(own[batch.traj], batch.advantages, per_token)
    return per_token, scalar
