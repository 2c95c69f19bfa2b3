"""Properties of the advantage methods over random batches (hypothesis): the sign of
A is never flipped where a method promises it; every result is invariant to the order
of groups and of trajectories within a group; the same input gives the same bytes;
the credit budget holds as documented; clipping bounds hold; masked tokens get 0;
the vectorised discounted sum equals the loop it replaces."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.distill.signals import PARAMS, TrajectoryTokens, compute_groups
from service.distill.signals.batch import discounted_future_sum

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
logprob = st.floats(min_value=-12.0, max_value=0.0, allow_nan=False)


@st.composite
def trajectories(draw: Any, *, horizons: tuple[str, ...] = ("h1", "h4"), own: bool = False) -> TrajectoryTokens:
    n = draw(st.integers(0, 7))
    steps = np.cumsum(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))).tolist()
    mask = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    student = draw(st.lists(logprob, min_size=n, max_size=n))
    teacher = {h: draw(st.lists(logprob, min_size=n, max_size=n)) for h in horizons}
    advantages = draw(st.floats(-3, 3, allow_nan=False)) if own else None
    return TrajectoryTokens(
        reward=draw(st.sampled_from([0.0, 1.0, 0.5])),
        student=student,
        teacher=teacher,
        post={"default": draw(st.lists(logprob, min_size=n, max_size=n))},
        pre={"default": draw(st.lists(logprob, min_size=n, max_size=n))},
        rollout=draw(st.lists(logprob, min_size=n, max_size=n)),
        ref=draw(st.lists(logprob, min_size=n, max_size=n)),
        mask=mask,
        steps=steps,
        entropy=draw(st.lists(st.floats(0, 5), min_size=n, max_size=n)),
        advantages=advantages,
    )


def batches(own: bool = False) -> Any:
    return st.lists(st.lists(trajectories(own=own), min_size=2, max_size=4), min_size=1, max_size=4)


METHOD_PARAMS = {
    "grpo": st.fixed_dictionaries({"std": st.booleans()}),
    "rloo": st.fixed_dictionaries({"scale": st.sampled_from(["group", "batch", "none"])}),
    "token_signal": st.fixed_dictionaries(
        {
            "teacher": st.just("h1"),
            "beta": st.floats(0, 2),
            "discount": st.sampled_from([0.0, 0.5, 0.9, 1.0]),
            "clip": st.one_of(st.none(), st.floats(0.1, 3), st.tuples(st.floats(-3, -0.1), st.floats(0.1, 3))),
            "compress": st.booleans(),
            "entropy_threshold": st.one_of(st.none(), st.floats(0, 4)),
        }
    ),
    "direct_opd": st.fixed_dictionaries(
        {
            "beta": st.floats(0, 2),
            "discount": st.sampled_from([0.0, 0.7]),
            "clip": st.one_of(st.none(), st.floats(0.1, 3)),
        }
    ),
    "step_shaping": st.fixed_dictionaries(
        {
            "teacher": st.just("h1"),
            "lambda": st.floats(0, 0.99),
            "alpha": st.floats(0.01, 1.0),
            "budget": st.one_of(st.none(), st.floats(0, 3)),
            "sign_aware": st.booleans(),
        }
    ),
    "horizon_agreement": st.fixed_dictionaries({"beta": st.floats(0, 3), "sign_aware": st.booleans()}),
}
IS_PARAMS = st.one_of(
    st.fixed_dictionaries(
        {"mode": st.just("tis"), "level": st.sampled_from(["token", "sequence"]), "cap": st.floats(0.1, 5)}
    ),
    st.fixed_dictionaries(
        {
            "mode": st.just("mis"),
            "level": st.sampled_from(["token", "sequence"]),
            "low": st.floats(0, 1),
            "high": st.floats(1, 5),
        }
    ),
)
KL_PARAMS = st.fixed_dictionaries(
    {"coef": st.floats(0, 2), "estimator": st.sampled_from(["k1", "k2", "k3"]), "centered": st.booleans()}
)
# what every method also takes: the off-policy weights, the KL penalty, the batch scale
EXTRAS = st.fixed_dictionaries(
    {},
    optional={"is": IS_PARAMS, "kl": KL_PARAMS, "scale": st.just("batch")},
)


def _with_extras(method: str) -> Any:
    def merge(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
        params, extra = pair
        if "scale" in extra:
            params = {k: v for k, v in params.items() if k not in ("std", "scale")}
        return params | extra

    return st.tuples(METHOD_PARAMS[method], EXTRAS).map(merge)


methods = st.sampled_from(sorted(METHOD_PARAMS)).flatmap(lambda m: st.tuples(st.just(m), _with_extras(m)))


def run(method: str, params: dict[str, Any], groups: list[list[TrajectoryTokens]]) -> Any:
    return compute_groups(method, PARAMS[method].model_validate(params), groups)


def per_trajectory(batch: Any, result: Any) -> list[dict[str, Any]]:
    out = []
    s = result.shaped
    steps = batch.steps
    for t in range(batch.trajectory_count):
        lo, hi = batch.offsets[t], batch.offsets[t + 1]
        row: dict[str, Any] = {"advantages": s.advantages[lo:hi], "A": result.scalar_advantage[t]}
        if s.signal is not None:
            row["r"] = s.signal.value[lo:hi]
        if s.step_signal is not None:
            row["steps"] = s.step_signal[steps.traj == t]
        if result.is_weights is not None:
            row["is_weights"] = result.is_weights[lo:hi]
        if result.kl is not None:
            row["kl"] = result.kl[lo:hi]
        out.append(row)
    return out


@SETTINGS
@given(batches(), methods)
def test_masked_tokens_get_zero_and_everything_is_finite(groups: Any, method: Any) -> None:
    batch, result = run(*method, groups)
    assert np.isfinite(result.shaped.advantages).all()
    assert (result.shaped.advantages[~batch.mask] == 0).all()


@SETTINGS
@given(batches(), methods, st.randoms(use_true_random=False))
def test_invariant_to_the_order_of_groups_and_trajectories(groups: Any, method: Any, rnd: Any) -> None:
    """To the last bit: sums across trajectories are added in value order (invariant_sum)."""
    batch, result = run(*method, groups)
    rows = per_trajectory(batch, result)
    ids = [[(g, i) for i in range(len(group))] for g, group in enumerate(groups)]
    for group in ids:
        rnd.shuffle(group)
    order = list(range(len(ids)))
    rnd.shuffle(order)
    shuffled = [[groups[g][i] for g, i in ids[k]] for k in order]
    batch2, result2 = run(*method, shuffled)
    rows2 = per_trajectory(batch2, result2)
    position = {gi: k for k, gi in enumerate(gi for k in order for gi in ids[k])}
    k = 0
    for g, group in enumerate(groups):
        for i in range(len(group)):
            a, b = rows[k], rows2[position[(g, i)]]
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            k += 1
    assert result.diagnostics == result2.diagnostics
    assert [result2.groups[order.index(g)] for g in range(len(groups))] == result.groups


@SETTINGS
@given(batches(), methods)
def test_deterministic(groups: Any, method: Any) -> None:
    _, one = run(*method, groups)
    _, two = run(*method, groups)
    assert one.shaped.advantages.tobytes() == two.shaped.advantages.tobytes()
    assert one.diagnostics == two.diagnostics and one.groups == two.groups


@SETTINGS
@given(batches(own=True), st.sampled_from(["step_shaping", "horizon_agreement"]), st.data())
def test_the_step_methods_never_flip_the_sign_of_a(groups: Any, method: str, data: Any) -> None:
    params = data.draw(METHOD_PARAMS[method])
    batch, result = run(method, params, groups)
    a, out = result.shaped.outcome[batch.mask], result.shaped.advantages[batch.mask]
    assert (np.sign(out) * np.sign(a) >= 0).all()  # same sign, or 0 (horizon_agreement's floor)
    if method == "step_shaping":
        assert (np.sign(out) == np.sign(a)).all()  # 1 + d > 0 strictly
    assert result.diagnostics["sign_flips"] == 0


@SETTINGS
@given(batches(own=True), METHOD_PARAMS["step_shaping"])
def test_the_credit_budget_holds(groups: Any, params: Any) -> None:
    """Σ_s |d_s| <= budget per trajectory (d_s = A'_s/A - 1), so with a scalar A,
    Σ_s |A'_s - A| <= budget·|A|; and a trajectory under budget is not scaled."""
    batch, result = run("step_shaping", params, groups)
    steps = batch.steps
    d = result.shaped.step_scale - 1
    spent = np.bincount(steps.traj, weights=np.abs(d), minlength=batch.trajectory_count)
    if params["budget"] is not None:
        assert (spent <= params["budget"] * (1 + 1e-12) + 1e-12).all()
    _, free = run("step_shaping", {**params, "budget": None}, groups)
    unscaled = np.bincount(steps.traj, weights=np.abs(free.shaped.step_scale - 1), minlength=batch.trajectory_count)
    under = params["budget"] is None or unscaled <= params["budget"]
    np.testing.assert_allclose(np.where(under, spent, unscaled), unscaled, rtol=1e-12, atol=1e-15)
    own = batch.scalar_advantage
    for t in range(batch.trajectory_count):
        lo, hi = batch.offsets[t], batch.offsets[t + 1]
        m = batch.mask[lo:hi]
        per_step = {}
        for s, a in zip(steps.seg[lo:hi][m], result.shaped.advantages[lo:hi][m], strict=True):
            per_step[s] = a
        total = sum(abs(a - own[t]) for a in per_step.values())
        if params["budget"] is not None:
            assert total <= params["budget"] * abs(own[t]) * (1 + 1e-9) + 1e-12


@SETTINGS
@given(batches(), METHOD_PARAMS["token_signal"])
def test_clipping_bounds_hold(groups: Any, params: Any) -> None:
    batch, result = run("token_signal", params, groups)
    r = result.shaped.signal.value[batch.mask]
    clip = params["clip"]
    if clip is not None:
        low, high = clip if isinstance(clip, tuple) else (-clip, clip)
        assert (r >= low).all() and (r <= high).all()
        share = result.diagnostics.get("clipped_tokens_share")
        assert share is None or 0 <= share <= 1


@SETTINGS
@given(st.lists(st.tuples(st.floats(-5, 5), st.integers(0, 3)), max_size=30), st.floats(0, 1))
def test_the_doubling_scan_equals_the_loop(items: Any, gamma: float) -> None:
    values = np.array([v for v, _ in items], dtype=np.float64)
    seg = np.cumsum([s > 0 for _, s in items]).astype(np.int64) if items else np.zeros(0, dtype=np.int64)
    expected = values.copy()
    for t in range(len(values) - 2, -1, -1):
        if seg[t + 1] == seg[t]:
            expected[t] = values[t] + gamma * expected[t + 1]
    np.testing.assert_allclose(discounted_future_sum(values, seg, gamma), expected, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=6), min_size=1, max_size=5))
def test_grpo_centres_and_scales_each_group(rewards: Any) -> None:
    groups = [[TrajectoryTokens(reward=r, mask=[1]) for r in group] for group in rewards]
    _, result = run("grpo", {"eps": 1e-9}, groups)
    k = 0
    for group in rewards:
        a = result.scalar_advantage[k : k + len(group)]
        k += len(group)
        assert abs(a.mean()) < 1e-6
        if np.std(group) > 1e-3:
            np.testing.assert_allclose(np.std(a, ddof=1), 1.0, rtol=1e-5)


@SETTINGS
@given(batches(), METHOD_PARAMS["grpo"], IS_PARAMS)
def test_is_weights_are_bounded_and_zero_on_masked_tokens(groups: Any, params: Any, is_params: Any) -> None:
    batch, result = run("grpo", params | {"is": is_params}, groups)
    w = result.is_weights
    assert np.isfinite(w).all() and (w >= 0).all()
    assert (w[~batch.mask] == 0).all()
    if is_params["mode"] == "tis":
        assert (w <= is_params["cap"]).all()
    else:  # kept: the ratio itself, inside [low, high]; else 0
        kept = w[w > 0]
        assert ((kept >= is_params["low"] * (1 - 1e-12)) & (kept <= is_params["high"] * (1 + 1e-12))).all()
    if is_params["level"] == "sequence":  # one weight per trajectory, on its unmasked tokens
        for t in range(batch.trajectory_count):
            lo, hi = batch.offsets[t], batch.offsets[t + 1]
            assert len(set(w[lo:hi][batch.mask[lo:hi]].tolist())) <= 1


@SETTINGS
@given(batches(), KL_PARAMS)
def test_a_centred_kl_penalty_sums_to_zero_over_the_batch(groups: Any, kl: Any) -> None:
    batch, result = run("grpo", {"kl": kl | {"centered": True}}, groups)
    _, plain = run("grpo", {}, groups)
    terms = result.kl[batch.mask]
    assert abs(terms.sum()) <= 1e-9 * max(1.0, np.abs(terms).sum())
    np.testing.assert_allclose(
        result.shaped.advantages, plain.shaped.advantages - kl["coef"] * result.kl, rtol=1e-12, atol=1e-12
    )


@SETTINGS
@given(st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=6), min_size=1, max_size=5))
def test_rloo_sums_to_zero_and_is_grpo_centred_times_n_over_n_minus_1(rewards: Any) -> None:
    """A_i = R_i - mean_{j≠i} R_j = n/(n-1)·(R_i - mean R): per group the A sum to 0 (and so do
    the per-token advantages when every trajectory has the same number of unmasked tokens)."""
    groups = [[TrajectoryTokens(reward=r, mask=[1, 1]) for r in group] for group in rewards]
    _, result = run("rloo", {}, groups)
    _, centred = run("grpo", {"std": False}, groups)
    k = 0
    for group in rewards:
        n = len(group)
        a = result.scalar_advantage[k : k + n]
        assert abs(a.sum()) <= 1e-9 * max(1.0, np.abs(group).sum())
        np.testing.assert_allclose(a, n / (n - 1) * centred.scalar_advantage[k : k + n], rtol=1e-9, atol=1e-9)
        assert abs(result.shaped.advantages[2 * k : 2 * (k + n)].sum()) <= 1e-8 * max(1.0, np.abs(group).sum())
        k += n


@SETTINGS
@given(st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=6), min_size=1, max_size=5))
def test_batch_scale_divides_the_centred_rewards_by_the_batch_std(rewards: Any) -> None:
    groups = [[TrajectoryTokens(reward=r, mask=[1]) for r in group] for group in rewards]
    _, batch = run("grpo", {"scale": "batch", "eps": 1e-9}, groups)
    _, centred = run("grpo", {"scale": "none"}, groups)
    flat = np.concatenate([np.asarray(g, dtype=np.float64) for g in rewards])
    std = np.std(flat, ddof=1) if len(flat) > 1 else 1.0
    np.testing.assert_allclose(batch.scalar_advantage * (std + 1e-9), centred.scalar_advantage, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(
    st.lists(
        st.lists(st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=5),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["grpo", "rloo"]),
    st.sampled_from(["group", "batch", "none"]),
    st.randoms(use_true_random=False),
)
def test_null_rewards_and_singletons_get_zero_and_keep_the_order_invariance(
    rewards: Any, method: str, scale: str, rnd: Any
) -> None:
    """Under null_rewards trl and singleton_groups verl nothing is refused: a null reward's A
    is 0, the others do not depend on it, and nothing depends on the order of the batch."""
    params = {"scale": scale, "null_rewards": "trl", "singleton_groups": "verl"}
    groups = [[TrajectoryTokens(reward=r, mask=[1]) for r in group] for group in rewards]
    _, result = run(method, params, groups)
    flat = [r for group in rewards for r in group]
    a = result.scalar_advantage
    assert np.isfinite(a).all()
    assert all(x == 0.0 for x, r in zip(a, flat, strict=True) if r is None)
    kept = [[TrajectoryTokens(reward=r, mask=[1]) for r in group if r is not None] for group in rewards]
    kept = [g for g in kept if g]
    if kept:
        _, without = run(method, params, kept)
        np.testing.assert_array_equal(
            without.scalar_advantage, [x for x, r in zip(a, flat, strict=True) if r is not None]
        )
    order = list(range(len(groups)))
    rnd.shuffle(order)
    _, shuffled = run(method, params, [groups[k] for k in order])
    starts = np.cumsum([0] + [len(g) for g in groups])
    expected = np.concatenate([a[starts[k] : starts[k + 1]] for k in order])
    np.testing.assert_array_equal(shuffled.scalar_advantage, expected)
