"""step_shaping (StepOPSD) and horizon_agreement (TurnSight) (service/distill/signals/
step_shaping.py) against values computed by hand, written out in the comments (the
worked examples of docs/distillation.md are these cases)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from domain.errors import InvalidInput
from service.distill.signals import TrajectoryTokens, compute_groups
from service.distill.signals.params import HorizonAgreementParams, StepShapingParams


def hindsight(gaps: list[float], advantage: float, **fields: Any) -> TrajectoryTokens:
    """Student log-probs -1, the hindsight teacher -1 + gap: r_t = gap_t."""
    student = np.full(len(gaps), -1.0)
    return TrajectoryTokens(
        reward=0.0, student=student, teacher={"hindsight": student + np.array(gaps)}, advantages=advantage, **fields
    )


# Steps [0, 0, 1, 1, 2], token 3 masked; gaps r = [0.2, 0.4, -3.0, (9, masked), -0.6]:
#   g_0 = (0.2 + 0.4) / 2 = 0.3, g_1 = -3.0 (its one unmasked token), g_2 = -0.6.
# λ = 0.5, α = 1: d = 0.5·clip(g, -1, 1) = [0.15, -0.5, -0.3], Σ|d| = 0.95.
STEPS = {"steps": [0, 0, 1, 1, 2], "mask": [1, 1, 1, 0, 1]}
GAPS = [0.2, 0.4, -3.0, 9.0, -0.6]


def shape(trajectories: list[TrajectoryTokens], **params: Any) -> Any:
    return compute_groups("step_shaping", StepShapingParams.model_validate(params), [trajectories])[1]


def test_step_shaping_by_hand_without_a_budget() -> None:
    # A = 2: A'_s = 2·(1 + d_s) = [2.3, 1.0, 1.4]; each step's value on each of its unmasked tokens
    result = shape([hindsight(GAPS, 2.0, **STEPS)], budget=None)
    assert result.shaped.advantages == pytest.approx([2.3, 2.3, 1.0, 0.0, 1.4])
    assert result.shaped.step_signal == pytest.approx([0.3, -3.0, -0.6])
    assert result.shaped.step_scale == pytest.approx([1.15, 0.5, 0.7])
    # step 1: without the clip, 1 + λ·g = 1 - 1.5 < 0 would have flipped A; clipped to -α instead
    assert result.diagnostics["sign_flips_prevented"] == 1
    assert result.diagnostics["clipped_steps_share"] == pytest.approx(1 / 3)
    assert result.diagnostics["sign_flips"] == 0


def test_step_shaping_scales_down_to_the_credit_budget() -> None:
    # budget 0.5 < Σ|d| = 0.95: d·(0.5/0.95) = [0.078947, -0.263158, -0.157895],
    # A' = 2·(1 + d) = [2.157895, 1.473684, 1.684211]; Σ_s|A'_s - A| = 2·0.5 = budget·|A|
    result = shape([hindsight(GAPS, 2.0, **STEPS)], budget=0.5)
    assert result.shaped.advantages == pytest.approx([2.157895, 2.157895, 1.473684, 0.0, 1.684211], abs=1e-6)
    assert np.abs(result.shaped.step_scale - 1).sum() * 2 == pytest.approx(0.5 * 2)
    assert result.diagnostics["budget_scaled"] == 1


def test_step_shaping_a_budget_not_reached_changes_nothing() -> None:
    assert shape([hindsight(GAPS, 2.0, **STEPS)], budget=1.0).shaped.advantages == pytest.approx(
        [2.3, 2.3, 1.0, 0.0, 1.4]
    )


def test_step_shaping_of_a_failed_trajectory_literal_and_sign_aware() -> None:
    # A = -2. literal: A·(1 + d) = [-2.3, -1.0, -1.4] (a step the teacher explains the failure
    # with, g > 0, takes more of the blame); sign_aware: A + |A|·d = [-1.7, -3.0, -2.6]
    # (a step the teacher endorses, g > 0, takes less)
    literal = shape([hindsight(GAPS, -2.0, **STEPS)], budget=None)
    assert literal.shaped.advantages == pytest.approx([-2.3, -2.3, -1.0, 0.0, -1.4])
    aware = shape([hindsight(GAPS, -2.0, **STEPS)], budget=None, sign_aware=True)
    assert aware.shaped.advantages == pytest.approx([-1.7, -1.7, -3.0, 0.0, -2.6])
    assert aware.shaped.step_scale == pytest.approx([0.85, 1.5, 1.3])


def test_lambda_times_alpha_of_one_or_more_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        StepShapingParams.model_validate({"lambda": 0.5, "alpha": 2.0})
    assert (err.value.field, err.value.rule) == ("params.lambda", "sign_preserving")


# Two siblings, horizons h1 and h4, one token per step, student log-probs -1, A sent:
#   a (A = +1): step gaps h1 [0.4, -0.2], h4 [0.6, 0.1] -> step 0 agrees (+), g = 0.5; step 1 does not
#   b (A = -1): h1 [-0.3, 0.2], h4 [-0.1, 0.4]      -> step 0 agrees (-), g = -0.2; step 1 (+), g = 0.3
# Agreeing steps of the group: g = [0.5, -0.2, 0.3], μ = 0.2,
#   σ = sqrt((0.3² + 0.4² + 0.1²)/3) = sqrt(0.086667) = 0.294392,
#   z = [0.3, -0.4, 0.1]/σ = [1.019049, -1.358732, 0.339683]; the disagreeing step: z = 0.
def horizons_group() -> list[TrajectoryTokens]:
    def member(h1: list[float], h4: list[float], advantage: float) -> TrajectoryTokens:
        student = np.array([-1.0, -1.0])
        return TrajectoryTokens(
            reward=advantage,
            student=student,
            teacher={"h1": student + h1, "h4": student + h4},
            steps=[0, 1],
            advantages=advantage,
        )

    return [member([0.4, -0.2], [0.6, 0.1], 1.0), member([-0.3, 0.2], [-0.1, 0.4], -1.0)]


def agreement(groups: list[list[TrajectoryTokens]], **params: Any) -> Any:
    params.setdefault("eps", 1e-12)
    return compute_groups("horizon_agreement", HorizonAgreementParams.model_validate(params), groups)[1]


def test_horizon_agreement_by_hand() -> None:
    # β = 0.5: 1 + 0.5·z = [1.509525, (1), 0.320634, 1.169842]
    # a: [+1·1.509525, +1·1] ; b: [-1·0.320634, -1·1.169842]
    result = agreement([horizons_group()], beta=0.5)
    assert result.shaped.step_signal == pytest.approx([1.019049, 0.0, -1.358732, 0.339683], abs=1e-6)
    assert result.shaped.advantages == pytest.approx([1.509525, 1.0, -0.320634, -1.169842], abs=1e-6)
    assert result.shaped.agree.tolist() == [True, False, True, True]
    assert result.diagnostics["agreement_share"] == pytest.approx(3 / 4)


def test_horizon_agreement_never_flips() -> None:
    # β = 1: b's step 0 has 1 - 1.358732 < 0: floored at 0 (A' = 0, not +0.358732)
    result = agreement([horizons_group()], beta=1.0)
    assert result.shaped.advantages == pytest.approx([2.019049, 1.0, 0.0, -1.339683], abs=1e-6)
    assert result.diagnostics["sign_flips_prevented"] == 1 and result.diagnostics["sign_flips"] == 0


def test_horizon_agreement_sign_aware() -> None:
    # b (A < 0): 1 + 0.5·(-1)·z: step 0: 1 + 0.679366, step 1: 1 - 0.169842
    result = agreement([horizons_group()], beta=0.5, sign_aware=True)
    assert result.shaped.advantages == pytest.approx([1.509525, 1.0, -1.679366, -0.830158], abs=1e-6)


def test_horizon_agreement_with_one_agreeing_step_or_a_constant_gap_modulates_nothing() -> None:
    # every agreeing step of the group has the same g: σ = 0, z = (g - μ)/(0 + eps) = 0
    student = np.array([-1.0])
    same = [
        TrajectoryTokens(reward=r, student=student, teacher={"h1": student + 0.5, "h4": student + 0.5}, advantages=r)
        for r in (1.0, -1.0)
    ]
    assert agreement([same]).shaped.advantages.tolist() == [1.0, -1.0]


def test_horizon_agreement_needs_siblings_even_with_advantages_sent() -> None:
    with pytest.raises(InvalidInput) as err:
        agreement([horizons_group(), horizons_group()[:1]])
    assert (err.value.field, err.value.rule) == ("groups[1].trajectories", "group_size")


def test_horizon_agreement_names_its_horizons() -> None:
    # only h4: every non-empty step "agrees" with itself; z over [0.6, 0.1, -0.1, 0.4]
    result = agreement([horizons_group()], horizons=["h4"])
    g = np.array([0.6, 0.1, -0.1, 0.4])
    assert result.shaped.step_signal == pytest.approx((g - g.mean()) / g.std(), abs=1e-9)
