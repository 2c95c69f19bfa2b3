"""The outcome advantage A (service/distill/signals/outcome.py) and the segment arithmetic
every method is written in (service/distill/signals/batch.py), against values computed by
hand (written out in the comments; docs/distillation.md shows the same cases)."""

from __future__ import annotations

import numpy as np
import pytest

from domain.errors import InvalidInput
from service.distill.signals import TrajectoryTokens, compute_groups, concat
from service.distill.signals.batch import discounted_future_sum, group_pairs, segment_mean
from service.distill.signals.params import GrpoParams


def T(reward: float, n: int = 2, **fields: object) -> TrajectoryTokens:
    fields.setdefault("mask", np.ones(n, dtype=int))
    return TrajectoryTokens(reward=reward, **fields)  # type: ignore[arg-type]


def grpo(groups: list[list[TrajectoryTokens]], **params: object) -> tuple[np.ndarray, np.ndarray]:
    _, result = compute_groups("grpo", GrpoParams.model_validate(params), groups)
    return result.shaped.advantages, result.scalar_advantage


def test_grpo_with_the_std_by_hand() -> None:
    # R = [1, 0, 0]: mean 1/3, deviations [2/3, -1/3, -1/3],
    # sample variance (4/9 + 1/9 + 1/9) / 2 = 1/3, std = 1/sqrt(3) = 0.577350,
    # A = [0.666667, -0.333333, -0.333333] / (0.577350 + 1e-6) = [1.154698, -0.577349, -0.577349]
    tokens, scalar = grpo([[T(1.0), T(0.0), T(0.0)]])
    assert scalar == pytest.approx([1.154698, -0.577349, -0.577349], abs=1e-6)
    assert tokens == pytest.approx([1.154698] * 2 + [-0.577349] * 4, abs=1e-6)  # A on each of the 2 tokens


def test_grpo_without_the_std_only_centres() -> None:
    # Dr. GRPO: A = R - mean = [1 - 1/3, 0 - 1/3, 0 - 1/3]
    _, scalar = grpo([[T(1.0), T(0.0), T(0.0)]], std=False)
    assert scalar == pytest.approx([2 / 3, -1 / 3, -1 / 3])


def test_grpo_groups_are_independent_and_equal_rewards_give_zero() -> None:
    # group 0: R = [2, 4]: mean 3, sample std sqrt(2), A = ±1/sqrt(2) = ±0.707107;
    # group 1: R = [5, 5]: every deviation 0, A = 0 / (0 + eps) = 0
    _, scalar = grpo([[T(2.0), T(4.0)], [T(5.0), T(5.0)]], eps=1e-12)
    assert scalar == pytest.approx([-0.707107, 0.707107, 0.0, 0.0], abs=1e-6)


def test_masked_tokens_get_no_advantage() -> None:
    tokens, _ = grpo([[T(1.0, mask=[1, 0, 1]), T(0.0, mask=[0, 1])]], std=False)
    # A = [0.5, -0.5]; token 1 of the first and token 0 of the second are not the student's
    assert tokens.tolist() == [0.5, 0.0, 0.5, 0.0, -0.5]


def test_a_group_of_one_is_refused_naming_the_group() -> None:
    with pytest.raises(InvalidInput) as err:
        grpo([[T(1.0), T(0.0)], [T(1.0)]])
    assert (err.value.field, err.value.rule) == ("groups[1].trajectories", "group_size")


def test_the_trainers_own_advantages_win_and_lift_the_group_rule() -> None:
    # the lone trajectory brings its A (one number); the pair's first one brings a per-token A
    groups = [[T(1.0, advantages=[0.3, -0.1]), T(0.0)], [T(1.0, advantages=0.25)]]
    tokens, scalar = grpo(groups, std=False)
    assert tokens.tolist() == [0.3, -0.1, -0.5, -0.5, 0.25, 0.25]
    assert np.isnan(scalar[0]) and scalar[1:].tolist() == [-0.5, 0.25]  # per-token A: no single number


def test_segment_mean_ignores_masked_entries_and_empty_segments_are_zero() -> None:
    # segments [0, 0, 1, 2, 2] with weights [1, 1, 0, 1, 0]: means [(1+2)/2, none -> 0, 4]
    out = segment_mean(np.array([1.0, 2.0, 9.0, 4.0, 9.0]), np.array([1.0, 1, 0, 1, 0]), np.array([0, 0, 1, 2, 2]), 4)
    assert out.tolist() == [1.5, 0.0, 4.0, 0.0]


def test_discounted_future_sum_by_hand() -> None:
    # segment 0: r = [1, 2, 3], γ = 0.5: R_2 = 3, R_1 = 2 + 0.5·3 = 3.5, R_0 = 1 + 0.5·3.5 = 2.75
    # segment 1: r = [4, -4]: R_1 = -4, R_0 = 4 + 0.5·(-4) = 2 (nothing crosses the boundary)
    out = discounted_future_sum(np.array([1.0, 2, 3, 4, -4]), np.array([0, 0, 0, 1, 1]), 0.5)
    assert out.tolist() == [2.75, 3.5, 3.0, 2.0, -4.0]
    assert discounted_future_sum(np.array([1.0, 2]), np.array([0, 0]), 0.0).tolist() == [1.0, 2.0]
    assert discounted_future_sum(np.array([1.0, 2, 3]), np.array([0, 0, 0]), 1.0).tolist() == [6.0, 5.0, 3.0]


def test_discounted_future_sum_is_stable_on_long_segments() -> None:
    # 100,000 tokens at γ = 0.9: the γ^(-t) rescaling trick would overflow; the scan does not.
    # For a constant r = 1 far from the end, R = 1 / (1 - γ) = 10.
    out = discounted_future_sum(np.ones(100_000), np.zeros(100_000, dtype=np.int64), 0.9)
    assert np.isfinite(out).all() and out[0] == pytest.approx(10.0) and out[-1] == 1.0


def test_group_pairs_are_every_ordered_sibling_pair() -> None:
    i, j = group_pairs(np.array([0, 1, 0, 1, 1]), 2)
    assert sorted(zip(i.tolist(), j.tolist(), strict=True)) == sorted(
        [(0, 2), (2, 0), (1, 3), (3, 1), (1, 4), (4, 1), (3, 4), (4, 3)]
    )


def test_concat_lays_trajectories_on_one_axis() -> None:
    batch = concat([[T(1.0, 2, steps=[0, 1]), T(0.0, 3, steps=[0, 0, 2])], [T(2.0, 1)]])
    assert batch.offsets.tolist() == [0, 2, 5, 6] and batch.group.tolist() == [0, 0, 1]
    assert batch.traj.tolist() == [0, 0, 1, 1, 1, 2]
    steps = batch.steps  # segments: (t0, s0) (t0, s1) (t1, s0) (t1, s2) (t2, s0)
    assert steps.seg.tolist() == [0, 1, 2, 2, 3, 4]
    assert steps.traj.tolist() == [0, 0, 1, 1, 2] and steps.index.tolist() == [0, 1, 0, 2, 0]
