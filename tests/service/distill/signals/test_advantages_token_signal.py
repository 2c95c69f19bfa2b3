"""token_signal and direct_opd with their regulators (service/distill/signals/token_signal.py)
against values computed by hand, written out in the comments (the worked examples of
docs/distillation.md are these cases)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from domain.errors import InvalidInput
from service.distill.signals import TrajectoryTokens, compute_groups
from service.distill.signals.params import DirectOpdParams, TokenSignalParams
from service.distill.signals.token_signal import forward_kl, topk_entropy


def gap_trajectory(gaps: list[float], reward: float = 1.0, **fields: Any) -> TrajectoryTokens:
    """Student log-probs -1 everywhere, teacher -1 + gap: r_t = gap_t."""
    student = np.full(len(gaps), -1.0)
    return TrajectoryTokens(reward=reward, student=student, teacher={"memory": student + np.array(gaps)}, **fields)


def token_signal(groups: list[list[TrajectoryTokens]], **params: Any) -> Any:
    return compute_groups("token_signal", TokenSignalParams.model_validate(params), groups)[1]


def test_the_signal_is_added_to_the_outcome_advantage() -> None:
    # student [-1, -2, -0.5], teacher [-0.5, -3, -0.5]: r = [0.5, -1, 0]; A = 1 (sent), β = 0.5:
    # A_t = 1 + 0.5·r = [1.25, 0.5, 1.0]
    traj = TrajectoryTokens(
        reward=1.0, student=[-1.0, -2.0, -0.5], teacher={"memory": [-0.5, -3.0, -0.5]}, advantages=1.0
    )
    result = token_signal([[traj]], beta=0.5)
    assert result.shaped.signal.value.tolist() == [0.5, -1.0, 0.0]
    assert result.shaped.advantages.tolist() == [1.25, 0.5, 1.0]


def test_with_grpo_when_no_advantages_are_sent() -> None:
    # R = [1, 0]: A = ±0.5 / (sqrt(0.5) + 1e-6) = ±0.707106; r = [0.2] and [-0.4], β = 1
    result = token_signal([[gap_trajectory([0.2], 1.0), gap_trajectory([-0.4], 0.0)]])
    assert result.shaped.advantages == pytest.approx([0.707106 + 0.2, -0.707106 - 0.4], abs=1e-6)


def test_discounted_future_sum_over_unmasked_tokens_only() -> None:
    # r = [0.5, -1, (3, masked), 2], γ = 0.5, A = 0 (outcome false), β = 1. The masked token
    # neither counts nor advances t: R_3 = 2, R_1 = -1 + 0.5·2 = 0, R_0 = 0.5 + 0.5·0 = 0.5
    traj = gap_trajectory([0.5, -1.0, 3.0, 2.0], mask=[1, 1, 0, 1])
    result = token_signal([[traj]], discount=0.5, outcome=False)
    assert result.shaped.advantages.tolist() == [0.5, 0.0, 0.0, 2.0]
    assert result.shaped.signal.value.tolist() == [0.5, -1.0, 0.0, 2.0]  # token_rewards: r_t, not R_t


def test_clipping_symmetric_and_by_range() -> None:
    # r = [0.5, -1, 2, 0.25], clip 0.5 -> [0.5, -0.5, 0.5, 0.25] (0.5 is on the bound: not clipped)
    traj = gap_trajectory([0.5, -1.0, 2.0, 0.25], advantages=0.0)
    result = token_signal([[traj]], clip=0.5)
    assert result.shaped.signal.value.tolist() == [0.5, -0.5, 0.5, 0.25]
    assert result.shaped.signal.clipped.tolist() == [False, True, True, False]
    assert result.diagnostics["clipped_tokens_share"] == 0.5
    # [-0.2, 1] -> [0.5, -0.2, 1.0, 0.25]
    result = token_signal([[traj]], clip=(-0.2, 1.0))
    assert result.shaped.signal.value.tolist() == [0.5, -0.2, 1.0, 0.25]


def test_log_compression_then_clipping() -> None:
    # r = [e - 1, -(e² - 1), 0]: sign(r)·log(1 + |r|) = [1, -2, 0]; then clip 1.5 -> [1, -1.5, 0]
    traj = gap_trajectory([math.e - 1, -(math.e**2 - 1), 0.0], advantages=0.0)
    assert token_signal([[traj]], compress=True).shaped.signal.value == pytest.approx([1.0, -2.0, 0.0])
    assert token_signal([[traj]], compress=True, clip=1.5).shaped.signal.value == pytest.approx([1.0, -1.5, 0.0])


def test_entropy_rule_down_weights_where_the_teacher_is_uncertain() -> None:
    # τ = 1, H = [0.5, 2, 4], r = [1, 1, -2]: H <= τ keeps r; else r·τ/H -> [1, 1·1/2, -2·1/4]
    traj = gap_trajectory([1.0, 1.0, -2.0], advantages=0.0, entropy=[0.5, 2.0, 4.0])
    result = token_signal([[traj]], entropy_threshold=1.0)
    assert result.shaped.signal.value.tolist() == [1.0, 0.5, -0.5]
    assert result.diagnostics["entropy_tokens_share"] == pytest.approx(2 / 3)


def test_entropy_rule_takes_the_forward_kl_from_the_top_k() -> None:
    # token 0: teacher top-2 [0.4, 0.4] (renormalised [0.5, 0.5]; H = ln 2 = 0.693 > τ = 0.5),
    #   the student's probabilities of those tokens [0.6, 0.2] (renormalised [0.75, 0.25]):
    #   KL = 0.5·ln(0.5/0.75) + 0.5·ln(0.5/0.25) = 0.5·(-0.405465) + 0.5·0.693147 = 0.143841,
    #   r_0 <- 0.3 - 0.143841 = 0.156159 (the sampled estimate augmented with the forward KL);
    # token 1: teacher top-2 [0.9, 0.1]: H = -(0.9 ln 0.9 + 0.1 ln 0.1) = 0.325083 <= τ: r_1 = 0.3 kept
    traj = gap_trajectory(
        [0.3, 0.3],
        advantages=0.0,
        topk_teacher=np.log([[0.4, 0.4], [0.9, 0.1]]),
        topk_student=np.log([[0.6, 0.2], [0.5, 0.5]]),
    )
    result = token_signal([[traj]], entropy_threshold=0.5)
    assert result.shaped.signal.value == pytest.approx([0.156159, 0.3], abs=1e-6)
    assert topk_entropy(np.log([[0.9, 0.1]])) == pytest.approx([0.325083], abs=1e-6)
    assert forward_kl(np.log([[0.5, 0.5]]), np.log([[0.75, 0.25]])) == pytest.approx([0.143841], abs=1e-6)


def test_a_sent_entropy_wins_over_the_top_k_one_and_k_may_differ_between_trajectories() -> None:
    # trajectory 0 sends H = 0.1 (<= τ): its top-k is not used; trajectory 1 (k = 3) has
    # top-k [1/3, 1/3, 1/3] (H = ln 3 > τ) and a student uniform over them too: KL = 0, r = 0.7 - 0
    one = gap_trajectory(
        [0.3], advantages=0.0, entropy=[0.1], topk_teacher=np.log([[0.5, 0.5]]), topk_student=np.log([[0.9, 0.1]])
    )
    two = gap_trajectory(
        [0.7], advantages=0.0, topk_teacher=np.log([[1 / 3] * 3]), topk_student=np.log([[0.1, 0.1, 0.1]])
    )
    result = token_signal([[one, two]], entropy_threshold=0.5)
    assert result.shaped.signal.value == pytest.approx([0.3, 0.7], abs=1e-12)


def test_the_teacher_is_named_when_several_are_sent() -> None:
    student = [-1.0, -1.0]
    traj = TrajectoryTokens(
        reward=0.0, student=student, teacher={"memory": [-0.5, -1.0], "hindsight@1": [-2.0, -1.0]}, advantages=0.0
    )
    with pytest.raises(InvalidInput) as err:
        token_signal([[traj]])
    assert (err.value.field, err.value.rule) == ("params.teacher", "required")
    assert token_signal([[traj]], teacher="hindsight@1").shaped.signal.value.tolist() == [-1.0, 0.0]


def test_direct_opd_composes_weighted_shifts() -> None:
    # shift rl: post [-1, -2] - pre [-1.5, -1] = [0.5, -1]; shift sft: [-0.2, -0.4] - [-0.4, -0.4] = [0.2, 0]
    # weights 1 and 0.5: r = [0.5 + 0.1, -1 + 0] = [0.6, -1]; A = 0.5, β = 1: [1.1, -0.5]
    traj = TrajectoryTokens(
        reward=1.0,
        post={"rl": [-1.0, -2.0], "sft": [-0.2, -0.4]},
        pre={"base": [-1.5, -1.0], "sft0": [-0.4, -0.4]},
        advantages=0.5,
    )
    params = DirectOpdParams.model_validate(
        {"shifts": [{"post": "rl", "pre": "base"}, {"post": "sft", "pre": "sft0", "weight": 0.5}]}
    )
    result = compute_groups("direct_opd", params, [[traj]])[1]
    assert result.shaped.signal.value == pytest.approx([0.6, -1.0])
    assert result.shaped.advantages == pytest.approx([1.1, -0.5])


def test_direct_opd_pairs_by_name_by_default_and_refuses_unpaired_names() -> None:
    traj = TrajectoryTokens(reward=1.0, post={"default": [-1.0]}, pre={"default": [-3.0]}, advantages=0.0)
    result = compute_groups("direct_opd", DirectOpdParams(), [[traj]])[1]
    assert result.shaped.advantages.tolist() == [2.0]  # log π_post - log π_pre = -1 - (-3)
    odd = TrajectoryTokens(reward=1.0, post={"rl": [-1.0]}, pre={"base": [-3.0]}, advantages=0.0)
    with pytest.raises(InvalidInput) as err:
        compute_groups("direct_opd", DirectOpdParams(), [[odd]])
    assert err.value.field == "params.shifts"


def test_direct_opd_entropy_rule_only_down_weights() -> None:
    # r = 2, H = 4 > τ = 1: r·1/4 = 0.5 even with a top-k sent (the signal is not a KL to the student)
    traj = TrajectoryTokens(
        reward=1.0,
        post={"default": [-1.0]},
        pre={"default": [-3.0]},
        advantages=0.0,
        entropy=[4.0],
        topk_teacher=np.log([[0.5, 0.5]]),
        topk_student=np.log([[0.9, 0.1]]),
    )
    result = compute_groups("direct_opd", DirectOpdParams(entropy_threshold=1.0), [[traj]])[1]
    assert result.shaped.signal.value.tolist() == [0.5]
