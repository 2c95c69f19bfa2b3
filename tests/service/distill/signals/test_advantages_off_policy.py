"""RLOO, the outcome advantage's scale, the conventions switches (groups of one, null
rewards, masked tokens in the discount), the reference-KL penalty and the off-policy
weights (service/distill/signals/outcome.py, off_policy.py), against values computed by
hand (written out in the comments; docs/distillation.md shows the same cases)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from domain.errors import InvalidInput
from service.distill.advantages.service import parse_params
from service.distill.signals import PARAMS, TrajectoryTokens, compute_groups


def T(reward: float | None, n: int = 1, **fields: object) -> TrajectoryTokens:
    fields.setdefault("mask", np.ones(n, dtype=int))
    return TrajectoryTokens(reward=reward, **fields)  # type: ignore[arg-type]


def run(method: str, params: dict[str, Any], groups: list[list[TrajectoryTokens]]) -> Any:
    return compute_groups(method, PARAMS[method].model_validate(params), groups)[1]


# --- rloo ------------------------------------------------------------------------------


def test_rloo_by_hand() -> None:
    # R = [1, 0, 0]: A_0 = 1 - (0 + 0)/2 = 1, A_1 = 0 - (1 + 0)/2 = -0.5, A_2 = -0.5
    result = run("rloo", {}, [[T(1.0, 3), T(0.0, 3), T(0.0, 3)]])
    assert result.scalar_advantage.tolist() == [1.0, -0.5, -0.5]
    assert result.shaped.advantages.tolist() == [1.0] * 3 + [-0.5] * 6  # broadcast on each token
    # R = [3, 1, 0, 2] (sum 6): 3 - 3/3 = 2, 1 - 5/3 = -2/3, 0 - 6/3 = -2, 2 - 4/3 = 2/3
    result = run("rloo", {}, [[T(3.0), T(1.0), T(0.0), T(2.0)]])
    assert result.scalar_advantage == pytest.approx([2.0, -2 / 3, -2.0, 2 / 3])


def test_rloo_scaled_by_the_group_std() -> None:
    # R = [1, 0, 0]: sample std 1/sqrt(3) = 0.577350; [1, -0.5, -0.5] / (0.577350 + 1e-6)
    result = run("rloo", {"scale": "group"}, [[T(1.0), T(0.0), T(0.0)]])
    assert result.scalar_advantage == pytest.approx([1.732048, -0.866024, -0.866024], abs=1e-6)
    assert run("rloo", {"std": True}, [[T(1.0), T(0.0), T(0.0)]]).scalar_advantage.tolist() == (
        result.scalar_advantage.tolist()
    )


def test_rloo_refuses_a_group_of_one_by_default() -> None:
    with pytest.raises(InvalidInput) as err:
        run("rloo", {}, [[T(1.0), T(0.0)], [T(2.0)]])
    assert (err.value.field, err.value.rule) == ("groups[1].trajectories", "group_size")


# --- scale -----------------------------------------------------------------------------


def test_batch_scale_divides_by_the_std_of_every_reward() -> None:
    # groups [1, 0] and [2, 4]; the batch's rewards [1, 0, 2, 4]: mean 1.75, squared
    # deviations 0.5625 + 3.0625 + 0.0625 + 5.0625 = 8.75, / 3 = 2.916667, std 1.707825;
    # centred in the group: [0.5, -0.5], [-1, 1]; A = centred / (1.707825 + 1e-6)
    result = run("grpo", {"scale": "batch"}, [[T(1.0), T(0.0)], [T(2.0), T(4.0)]])
    assert result.scalar_advantage == pytest.approx([0.292770, -0.292770, -0.585540, 0.585540], abs=1e-6)
    # the same with std: true sent beside it (std true: a std, group's or batch's)
    same = run("grpo", {"scale": "batch", "std": True}, [[T(1.0), T(0.0)], [T(2.0), T(4.0)]])
    assert same.scalar_advantage.tolist() == result.scalar_advantage.tolist()


def test_scale_none_and_group_are_std_false_and_true() -> None:
    groups = [[T(1.0), T(0.0), T(0.0)]]
    assert run("grpo", {"scale": "none"}, groups).scalar_advantage == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert run("grpo", {"scale": "group"}, groups).scalar_advantage == pytest.approx(
        [1.154698, -0.577349, -0.577349], abs=1e-6
    )


@pytest.mark.parametrize(("std", "scale"), [(False, "group"), (False, "batch"), (True, "none")])
def test_a_contradictory_std_and_scale_is_refused(std: bool, scale: str) -> None:
    with pytest.raises(InvalidInput) as err:
        PARAMS["grpo"].model_validate({"std": std, "scale": scale})
    assert (err.value.field, err.value.rule) == ("params.scale", "consistent")


def test_scale_resolves_from_std_and_std_from_scale() -> None:
    assert PARAMS["grpo"].model_validate({}).scale == "group"
    assert PARAMS["grpo"].model_validate({"std": False}).scale == "none"
    assert PARAMS["rloo"].model_validate({}).scale == "none"
    assert PARAMS["grpo"].model_validate({"scale": "none"}).std is False


# --- conventions -----------------------------------------------------------------------


def test_singleton_groups_verl() -> None:
    # verl's compute_grpo_outcome_advantage: a group of one has mean 0 and std 1:
    # A = (2 - 0) / (1 + 1e-6) = 1.999998; the pair [1, 0]: ±0.5 / (0.707107 + 1e-6)
    groups = [[T(2.0)], [T(1.0), T(0.0)]]
    assert run("grpo", {"singleton_groups": "verl"}, groups).scalar_advantage == pytest.approx(
        [1.999998, 0.707106, -0.707106], abs=1e-6
    )
    # without the std: A = R - 0 = 2; rloo (verl's compute_rloo_outcome_advantage): R itself
    assert run("grpo", {"singleton_groups": "verl", "std": False}, groups).scalar_advantage.tolist() == [
        2.0,
        0.5,
        -0.5,
    ]
    assert run("rloo", {"singleton_groups": "verl"}, groups).scalar_advantage.tolist() == [2.0, 1.0, -1.0]


def test_null_rewards_trl_are_left_out_of_the_baseline() -> None:
    # R = [1, null, 0, 0]: the group is [1, 0, 0] (A as test_grpo_with_the_std_by_hand), the null one 0
    result = run("grpo", {"null_rewards": "trl"}, [[T(1.0), T(None), T(0.0), T(0.0)]])
    assert result.scalar_advantage == pytest.approx([1.154698, 0.0, -0.577349, -0.577349], abs=1e-6)
    assert result.groups[0]["reward_mean"] == pytest.approx(1 / 3)
    assert result.diagnostics["null_rewards"] == 1
    # rloo: [1, null, 0]: 1 - 0 = 1, 0, 0 - 1 = -1
    assert run("rloo", {"null_rewards": "trl"}, [[T(1.0), T(None), T(0.0)]]).scalar_advantage.tolist() == [
        1.0,
        0.0,
        -1.0,
    ]


def test_a_group_with_one_scored_reward_is_a_group_of_one() -> None:
    with pytest.raises(InvalidInput) as err:
        run("grpo", {"null_rewards": "trl"}, [[T(1.0), T(None)]])
    assert (err.value.field, err.value.rule) == ("groups[0].trajectories", "group_size")
    # verl's rule then applies to the one scored: (1 - 0) / (1 + 1e-6)
    result = run("grpo", {"null_rewards": "trl", "singleton_groups": "verl"}, [[T(1.0), T(None)]])
    assert result.scalar_advantage == pytest.approx([0.999999, 0.0], abs=1e-6)


def test_discount_masked_advances_the_clock_on_masked_tokens() -> None:
    # r = [0.5, -1, (3, masked), 2], γ = 0.5, A = 0 (test_advantages_token_signal's case);
    # with the masked token advancing the clock (contributing 0): R_3 = 2, R_2 = 0 + 0.5·2 = 1,
    # R_1 = -1 + 0.5·1 = -0.5, R_0 = 0.5 + 0.5·(-0.5) = 0.25; without: [0.5, 0, (0), 2]
    traj = T(1.0, student=[-1.0] * 4, teacher={"default": [-0.5, -2.0, 2.0, 1.0]}, mask=[1, 1, 0, 1])
    params = {"discount": 0.5, "outcome": False}
    assert run("token_signal", params | {"discount_masked": True}, [[traj]]).shaped.advantages.tolist() == [
        0.25,
        -0.5,
        0.0,
        2.0,
    ]
    assert run("token_signal", params, [[traj]]).shaped.advantages.tolist() == [0.5, 0.0, 0.0, 2.0]


# --- reference KL ----------------------------------------------------------------------

STUDENT = [-1.0, -0.5, -2.0, -0.3]
REF = [-1.5, -0.5, -1.0, -9.0]
MASK = [1, 1, 1, 0]


@pytest.mark.parametrize(
    ("estimator", "centered", "kl", "advantages"),
    [
        # d = student - ref = [0.5, 0, -1] on the unmasked tokens; A = 1 (the trainer's), coef 0.5
        # k1 = d = [0.5, 0, -1]: A - 0.5·k1 = [0.75, 1, 1.5]
        ("k1", False, [0.5, 0.0, -1.0], [0.75, 1.0, 1.5]),
        # centred: mean k1 = -1/6: [0.666667, 0.166667, -0.833333] -> [0.666667, 0.916667, 1.416667]
        ("k1", True, [0.666667, 0.166667, -0.833333], [0.666667, 0.916667, 1.416667]),
        # k2 = d²/2 = [0.125, 0, 0.5] -> [0.9375, 1, 0.75]
        ("k2", False, [0.125, 0.0, 0.5], [0.9375, 1.0, 0.75]),
        # centred: mean 0.208333: [-0.083333, -0.208333, 0.291667] -> [1.041667, 1.104167, 0.854167]
        ("k2", True, [-0.083333, -0.208333, 0.291667], [1.041667, 1.104167, 0.854167]),
        # k3 = exp(-d) - 1 + d: e^-0.5 - 0.5 = 0.106531, 0, e - 2 = 0.718282 -> [0.946735, 1, 0.640859]
        ("k3", False, [0.106531, 0.0, 0.718282], [0.946735, 1.0, 0.640859]),
        # centred: mean 0.274937: [-0.168407, -0.274937, 0.443344] -> [1.084203, 1.137469, 0.778328]
        ("k3", True, [-0.168407, -0.274937, 0.443344], [1.084203, 1.137469, 0.778328]),
    ],
)
def test_kl_penalty_by_hand(estimator: str, centered: bool, kl: list[float], advantages: list[float]) -> None:
    params = {"kl": {"coef": 0.5, "estimator": estimator, "centered": centered}}
    result = run("grpo", params, [[T(1.0, student=STUDENT, ref=REF, mask=MASK, advantages=1.0)]])
    assert result.kl.tolist() == pytest.approx([*kl, 0.0], abs=1e-6)
    assert result.shaped.advantages.tolist() == pytest.approx([*advantages, 0.0], abs=1e-6)
    means = {"k1": -1 / 6, "k2": 0.208333, "k3": 0.274937}  # over the unmasked tokens, before centring
    assert result.diagnostics["kl_mean"] == pytest.approx(means[estimator], abs=1e-6)


def test_kl_applies_on_a_token_method_after_its_shaping() -> None:
    # token_signal: r = teacher - student = [0.5, 0.5, 0.5]; A = 0 (outcome false), β = 1;
    # k1 = d = [0.5, 0, -1], coef 1: [0.5 - 0.5, 0.5 - 0, 0.5 + 1] = [0, 0.5, 1.5]
    traj = T(1.0, student=STUDENT[:3], teacher={"default": [-0.5, 0.0, -1.5]}, ref=REF[:3], mask=[1, 1, 1])
    result = run("token_signal", {"outcome": False, "kl": {"coef": 1.0}}, [[traj]])
    assert result.shaped.advantages.tolist() == pytest.approx([0.0, 0.5, 1.5])
    assert result.shaped.signal.value.tolist() == pytest.approx([0.5, 0.5, 0.5])  # token_rewards: the signal alone


# --- off-policy weights ----------------------------------------------------------------

ROLLOUT = [-1.2, -1.5, -1.9, -0.3]


@pytest.mark.parametrize(
    ("params", "weights", "share"),
    [
        # δ = student - rollout = [0.2, 1.0, -0.1] (token 3 masked); ρ = [1.221403, 2.718282, 0.904837]
        # tis, cap 2 (the default): [1.221403, 2, 0.904837]; 1 of 3 truncated
        ({"mode": "tis"}, [1.221403, 2.0, 0.904837], ("is_truncated_share", 1 / 3)),
        # mis [0.95, 2]: only ρ_0 is inside; the kept weight is ρ itself
        ({"mode": "mis", "low": 0.95, "high": 2.0}, [1.221403, 0.0, 0.0], ("is_masked_share", 2 / 3)),
        # mis with the defaults: high 2, low 1/2 = 0.5: ρ_1 = e > 2 masked
        ({"mode": "mis"}, [1.221403, 0.0, 0.904837], ("is_masked_share", 1 / 3)),
        # sequence: exp(mean δ) = exp(1.1 / 3) = 1.442917 on every token; tis cap 1.2: all truncated
        ({"mode": "tis", "level": "sequence", "cap": 1.2}, [1.2, 1.2, 1.2], ("is_truncated_share", 1.0)),
        # mis high 1.5, low 1/1.5: 1.442917 is inside
        ({"mode": "mis", "level": "sequence", "high": 1.5}, [1.442917] * 3, ("is_masked_share", 0.0)),
        # mis high 1.4: outside, every token 0
        ({"mode": "mis", "level": "sequence", "high": 1.4}, [0.0] * 3, ("is_masked_share", 1.0)),
    ],
)
def test_is_weights_by_hand(params: dict[str, Any], weights: list[float], share: tuple[str, float]) -> None:
    result = run("grpo", {"is": params}, [[T(1.0, student=STUDENT, rollout=ROLLOUT, mask=MASK, advantages=1.0)]])
    assert result.is_weights.tolist() == pytest.approx([*weights, 0.0], abs=1e-6)  # 0 on the masked token
    key, value = share
    assert result.diagnostics[key] == pytest.approx(value)
    # mismatch KL, k3 of KL(rollout ‖ student): mean of e^δ - δ - 1 = (0.021403 + 0.718282 + 0.004837) / 3
    assert result.diagnostics["mismatch_kl"] == pytest.approx(0.248174, abs=1e-6)
    expected_max = math.e if params.get("level", "token") == "token" else math.exp(1.1 / 3)
    assert result.diagnostics["is_max_ratio"] == pytest.approx(expected_max)
    assert result.shaped.advantages.tolist() == [1.0, 1.0, 1.0, 0.0]  # the weights are returned, not applied


def test_a_huge_log_ratio_is_bounded_not_overflowed() -> None:
    # δ = 0 - (-1000): exp is taken of min(δ, 20) (verl's SAFETY_BOUND); tis caps it at 2
    result = run("grpo", {"is": {"mode": "tis"}}, [[T(1.0, student=[0.0], rollout=[-1000.0], advantages=0.0)]])
    assert result.is_weights.tolist() == [2.0]
    assert result.diagnostics["is_max_ratio"] == pytest.approx(math.exp(20))
    assert np.isfinite(result.diagnostics["mismatch_kl"])


@pytest.mark.parametrize(
    ("params", "field", "rule"),
    [
        ({"is": {"mode": "tis", "cap": 0}}, "params.is.cap", "greater_than"),
        ({"is": {"mode": "mis", "low": 2.0, "high": 1.0}}, "params.is.low", "low_le_high"),
        ({"is": {"mode": "tis", "high": 3.0}}, "params.is.high", "mode_param"),
        ({"is": {"mode": "mis", "cap": 3.0}}, "params.is.cap", "mode_param"),
    ],
)
def test_is_params_are_checked(params: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_params("grpo", params)  # as the service reads them: pydantic's errors named params.…
    assert (err.value.field, err.value.rule) == (field, rule)
