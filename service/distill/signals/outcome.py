"""The outcome advantage A of each trajectory: the trainer's own `advantages` when it
sends them, else group-relative over the trajectory's rollout group G:

    grpo (Shao et al. 2024 "DeepSeekMath"):     A_i = (R_i − mean_G R) / (s + eps)
    rloo (Kool et al. 2019; Ahmadian et al. 2024): A_i = (R_i − mean_{j∈G, j≠i} R_j) / (s + eps)

with s, by `scale`: group: the group's sample std of R (ddof 1, as torch.std in verl
and TRL); batch: the sample std of every reward in the batch (TRL's
scale_rewards="batch"; the mean stays the group's); none: no division (Dr. GRPO; RLOO).

Conventions (params): a group of one is refused (`singleton_groups: "refuse"`), or
given mean 0 and std 1 as verl's compute_grpo_outcome_advantage / compute_rloo_outcome_advantage
do (`"verl"`: A = R/(1 + eps) with a group std, R without a std). A null reward is
refused (`null_rewards: "refuse"`), or left out of its group's mean and std and of the
batch std, its own A 0 (`"trl"`, as TRL's GRPOTrainer treats a completion no reward
function could score: nanmean / nanstd, then NaN advantages set to 0). "Group of one"
counts the group's non-null rewards.
"""

from __future__ import annotations

import numpy as np

from domain.errors import InvalidInput
from service.distill.signals.batch import TokenBatch, invariant_sum


def group_relative(
    reward: np.ndarray,
    group: np.ndarray,
    group_count: int,
    *,
    scale: str,
    eps: float,
    leave_one_out: bool = False,
    singletons: str = "refuse",
) -> np.ndarray:
    """(T,) group-relative advantages (NaN rewards: left out, A = 0). Groups of one give
    NaN under singletons "refuse" (the caller refuses them), else verl's mean 0, std 1."""
    valid = ~np.isnan(reward)
    r = np.where(valid, reward, 0.0)
    n = np.bincount(group, weights=valid, minlength=group_count).astype(np.float64)
    total = invariant_sum(r, group, group_count)
    mean = np.divide(total, n, out=np.zeros(group_count), where=n > 0)
    alone = n[group] == 1
    if leave_one_out:
        others = np.divide(total[group] - r, n[group] - 1, out=np.zeros(len(r)), where=n[group] > 1)
        centred = r - others
    else:
        centred = r - np.where(alone, 0.0, mean[group])
    if scale == "group":
        dev = np.where(valid, r - mean[group], 0.0)
        var = np.divide(invariant_sum(dev**2, group, group_count), n - 1, out=np.full(group_count, np.nan), where=n > 1)
        spread = np.where(alone, 1.0, np.sqrt(var)[group])
        out = centred / (spread + eps)
    elif scale == "batch":
        out = centred / (batch_std(reward) + eps)
    else:
        out = centred
    if singletons == "refuse":
        out = np.where(alone, np.nan, out)
    return np.where(valid, out, 0.0)


def batch_std(reward: np.ndarray) -> float:
    """The sample std (ddof 1) of the batch's non-null rewards, added in value order; 1
    under two rewards (verl's std for a lone reward, where TRL's 0 would divide by eps)."""
    values = np.sort(reward[~np.isnan(reward)])
    if len(values) < 2:
        return 1.0
    mean = values.sum() / len(values)
    return float(np.sqrt(np.sort((values - mean) ** 2).sum() / (len(values) - 1)))


def require_siblings(batch: TokenBatch, needed: np.ndarray, method: str, *, scored: bool = False) -> None:
    """Refuse the first group (in request order) of one trajectory among those that need
    siblings (with `scored`, one non-null reward)."""
    members = ~np.isnan(batch.reward) if scored else np.ones(batch.trajectory_count, dtype=bool)
    size = np.bincount(batch.group, weights=members, minlength=batch.group_count)
    lonely = np.flatnonzero((size == 1) & (np.bincount(batch.group, weights=needed, minlength=batch.group_count) > 0))
    if len(lonely):
        g = int(lonely[0])
        if method == "horizon_agreement":
            why = "horizon_agreement normalises the step signal across sibling rollouts"
        else:
            why = (
                "the outcome advantage A is group-relative: send `advantages` for it, or its siblings, or "
                'params.singleton_groups: "verl"'
            )
        counted = (
            "one scored trajectory (a non-null reward)"
            if scored and np.sum(batch.group == g) > 1
            else ("one trajectory")
        )
        raise InvalidInput(
            f"groups[{g}] has {counted}; {why} (at least 2 per group)",
            field=f"groups[{g}].trajectories",
            rule="group_size",
        )


def outcome_advantages(
    batch: TokenBatch,
    *,
    scale: str,
    eps: float,
    method: str,
    use: bool = True,
    singletons: str = "refuse",
) -> tuple[np.ndarray, np.ndarray]:
    """(per-token A (N,), per-trajectory scalar A (T,)). The scalar is NaN where the
    trainer sent a per-token list (its A need not be constant). Masked tokens are not
    touched here (each method zeroes them)."""
    t_count = batch.trajectory_count
    if not use:
        return np.zeros(batch.size), np.zeros(t_count)
    own = batch.own_advantage if batch.own_advantage is not None else np.zeros(t_count, dtype=bool)
    if singletons == "refuse":
        require_siblings(batch, ~own, method, scored=True)
    scalar = group_relative(
        batch.reward,
        batch.group,
        batch.group_count,
        scale=scale,
        eps=eps,
        leave_one_out=method == "rloo",
        singletons=singletons,
    )
    if batch.scalar_advantage is not None:
        scalar = np.where(own, batch.scalar_advantage, scalar)
    per_token = scalar[batch.traj]
    if batch.advantages is not None:
        per_token = np.where(own[batch.traj], batch.advantages, per_token)
    return per_token, scalar
