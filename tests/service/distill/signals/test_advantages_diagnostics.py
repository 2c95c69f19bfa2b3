"""The diagnostics (service/distill/signals/diagnostics.py) on small batches computed by hand:
Uni-OPD's order consistency, the length correlation, the tails of r_t, per group."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.distill.signals import TrajectoryTokens, compute_groups
from service.distill.signals.params import GrpoParams, TokenSignalParams


def signal(reward: float, gaps: list[float]) -> TrajectoryTokens:
    student = np.full(len(gaps), -2.0)
    return TrajectoryTokens(reward=reward, student=student, teacher={"memory": student + np.array(gaps)})


def run(groups: list[list[TrajectoryTokens]], **params: Any) -> Any:
    return compute_groups("token_signal", TokenSignalParams.model_validate(params), groups)[1]


def test_order_consistency_counts_ties_half() -> None:
    # R = [1, 0, 0], summed signals S = [2, 1, 2]. Pairs with R_i > R_j: (0, 1): 2 > 1 -> 1;
    # (0, 2): 2 = 2 -> 1/2. Share (1 + 0.5) / 2 = 0.75.
    result = run([[signal(1.0, [2.0]), signal(0.0, [0.5, 0.5]), signal(0.0, [1.0, 0.5, 0.5])]])
    assert result.diagnostics["order_pairs"] == 2
    assert result.diagnostics["order_consistency"] == 0.75
    assert result.groups[0]["order_consistency"] == 0.75


def test_order_consistency_pools_groups_and_is_null_without_a_pair() -> None:
    # group 0: R = [1, 0], S = [1, 2]: inconsistent (0 of 1); group 1: R equal: no pair;
    # group 2: R = [0, 1, 0.5], S = [0, 3, 1]: pairs (1,0) 3>0, (1,2) 3>1, (2,0) 1>0: 3 of 3
    groups = [
        [signal(1.0, [1.0]), signal(0.0, [2.0])],
        [signal(1.0, [1.0]), signal(1.0, [2.0])],
        [signal(0.0, [0.0]), signal(1.0, [3.0]), signal(0.5, [1.0])],
    ]
    result = run(groups)
    assert [g["order_consistency"] for g in result.groups] == [0.0, None, 1.0]
    assert [g["order_pairs"] for g in result.groups] == [1, 0, 3]
    assert result.diagnostics["order_consistency"] == 0.75  # (0 + 3) / 4


def test_length_correlation_catches_a_signal_that_grows_with_length() -> None:
    # lengths [1, 2, 3], every token r = 1: S = [1, 2, 3] = L: Pearson r = 1
    result = run([[signal(1.0, [1.0]), signal(0.0, [1.0, 1.0]), signal(0.0, [1.0] * 3)]])
    assert result.diagnostics["length_correlation"] == pytest.approx(1.0)
    # S = [3, 2, 1] against L = [1, 2, 3]: r = -1; a constant S: null
    result = run([[signal(1.0, [3.0]), signal(0.0, [1.0, 1.0]), signal(0.0, [1 / 3] * 3)]])
    assert result.diagnostics["length_correlation"] == pytest.approx(-1.0)
    result = run([[signal(1.0, [1.0]), signal(0.0, [0.5, 0.5])]])
    assert result.diagnostics["length_correlation"] is None


def test_the_tails_of_r_are_over_unmasked_tokens() -> None:
    # r = [0, 1, 2, 3, 4] (and a masked 100): p50 2, p25 1, p1 0 + 0.01·4 = 0.04, p99 3.96,
    # mean 2, population std sqrt(2)
    student = np.full(6, -1.0)
    traj = TrajectoryTokens(
        reward=0.0,
        student=student,
        teacher={"m": student + [0.0, 1, 2, 100, 3, 4]},
        mask=[1, 1, 1, 0, 1, 1],
        advantages=0.0,
    )
    stats = run([[traj]]).diagnostics["token_reward"]
    assert (stats["p50"], stats["p25"], stats["mean"], stats["max"]) == (2.0, 1.0, 2.0, 4.0)
    assert stats["p1"] == pytest.approx(0.04) and stats["p99"] == pytest.approx(3.96)
    assert stats["std"] == pytest.approx(np.sqrt(2))


def test_per_group_rows_and_counts() -> None:
    groups = [[signal(1.0, [1.0, -1.0]), signal(0.0, [0.5])], [signal(3.0, [0.0]), signal(1.0, [0.0])]]
    result = run(groups, clip=0.75)
    g0, g1 = result.groups
    assert (g0["trajectories"], g0["tokens"], g0["reward_mean"]) == (2, 3, 0.5)
    assert g0["reward_std"] == pytest.approx(np.sqrt(0.5))
    assert g0["clipped_tokens_share"] == pytest.approx(2 / 3) and g1["clipped_tokens_share"] == 0.0
    assert g0["signal_mean"] == pytest.approx((0.0 + 0.5) / 2)  # S = [0.75 - 0.75, 0.5]
    assert result.diagnostics["tokens"] == 5 and result.diagnostics["groups"] == 2


def test_grpo_has_no_signal_statistics() -> None:
    traj = [TrajectoryTokens(reward=1.0, mask=[1]), TrajectoryTokens(reward=0.0, mask=[1])]
    result = compute_groups("grpo", GrpoParams(), [traj])[1]
    assert "token_reward" not in result.diagnostics and result.diagnostics["advantages"]["max"] > 0
