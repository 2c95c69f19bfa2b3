"""``distill_advantages_batched`` against a real server (``live_server``): a batch
split under small limits gives the numbers of the same batch sent whole, to the bit
for every trajectory and group; the batch diagnostics combined or recomputed equal
the whole batch's; what cannot be split (a group over a limit, ``scale: "batch"``,
``kl.centered``) is refused before anything is sent; the async twin agrees."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import pytest
from pydantic import BaseModel
from reflexa import AsyncClient, Client, errors

SPLIT = 170  # tokens per request: a group holds at most 4 × 40
CASES: list[tuple[str, dict[str, Any]]] = [
    ("grpo", {}),
    ("rloo", {}),
    ("token_signal", {"clip": 1.0, "discount": 0.9}),
    ("token_signal", {"compress": True, "kl": {"coef": 0.1, "estimator": "k3"}, "is": {"mode": "tis"}}),
    ("step_shaping", {}),
    ("horizon_agreement", {}),
]


def batch(groups: int = 7, size: int = 4, seed: int = 3) -> list[dict[str, Any]]:
    """Groups of `size` rollouts of 5..40 tokens, tool output masked, two steps each,
    every log-prob the methods above read."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        trajectories = []
        for i in range(size):
            n = rng.randint(5, 40)
            student = [-rng.expovariate(1.5) for _ in range(n)]

            def near(xs: list[float]) -> list[float]:
                return [min(0.0, x + rng.gauss(0, 0.4)) for x in xs]

            trajectories.append(
                {
                    "id": f"g{g}t{i}",
                    "reward": float(rng.random() < 0.5) + 0.1 * i,
                    "mask": [0 if n // 3 <= t < n // 3 + 2 else 1 for t in range(n)],
                    "token_steps": [0 if t < n // 2 else 1 for t in range(n)],
                    "logprobs": {
                        "student": student,
                        "teacher": {"h1": near(student), "h2": near(student)},
                        "rollout": near(student),
                        "ref": near(student),
                    },
                }
            )
        out.append({"group_id": f"group-{g}", "trajectories": trajectories})
    return out


def teacher_params(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method in ("token_signal", "step_shaping"):
        return {**params, "teacher": "h1"}
    return params


def close(a: float | None, b: float | None, tol: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


@pytest.mark.parametrize(("method", "params"), CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_split_equals_whole(admin: Client, method: str, params: dict[str, Any]) -> None:
    groups = batch()
    params = teacher_params(method, params)
    whole = admin.distill_advantages(method, groups, params=params)
    one = admin.distill_advantages_batched(method, groups, params=params)
    assert len(one.requests) == 1 and one.trajectories == whole.trajectories and one.diagnostics == whole.diagnostics

    split = admin.distill_advantages_batched(method, groups, params=params, max_tokens=SPLIT)
    assert len(split.requests) >= 3
    assert max(r.tokens for r in split.requests) <= SPLIT  # unmasked tokens: under the limit on all tokens
    assert [t.id for t in split.trajectories] == [t["id"] for g in groups for t in g["trajectories"]]
    assert split.trajectories == whole.trajectories  # to the bit: every number is per group
    assert split.params == whole.params
    assert split.diagnostics.groups == whole.diagnostics.groups
    got, want = split.diagnostics.batch, whole.diagnostics.batch
    for name in type(want).model_fields:
        g, w = getattr(got, name), getattr(want, name)
        if name == "token_reward_raw":
            assert g is None  # not returned per token: not recomputable from the answer
        elif isinstance(w, BaseModel):
            assert all(close(getattr(g, k), getattr(w, k)) for k in type(w).model_fields), name
        elif isinstance(w, float):
            assert close(g, w), (name, g, w)
        else:
            assert g == w, name
    assert split.diagnostics.batch.tokens == sum(r.tokens for r in split.requests)


def test_body_limit_splits_and_async_agrees(admin: Client, live_server: Any) -> None:
    groups = batch(groups=5)
    whole = admin.distill_advantages("token_signal", groups, params={"teacher": "h2"})
    split = admin.distill_advantages_batched("token_signal", groups, params={"teacher": "h2"}, max_bytes=12_000)
    assert len(split.requests) > 1 and split.trajectories == whole.trajectories

    async def run() -> Any:
        async with AsyncClient(live_server.url, live_server.admin_key) as client:
            return await client.distill_advantages_batched(
                "token_signal", groups, params={"teacher": "h2"}, max_bytes=12_000
            )

    assert asyncio.run(run()).trajectories == whole.trajectories


def test_a_group_over_a_limit_is_named(admin: Client) -> None:
    groups = batch(groups=3)
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("grpo", groups, max_group_size=3)
    assert exc.value.field == "groups[0]" and exc.value.rule == "max_group_size"
    assert "'group-0'" in str(exc.value) and "4 trajectories" in str(exc.value)
    sizes = [sum(len(t["mask"]) for t in g["trajectories"]) for g in groups]
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("grpo", groups, max_tokens=max(sizes) - 1)
    assert exc.value.field == f"groups[{sizes.index(max(sizes))}]" and exc.value.rule == "max_tokens"
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("grpo", groups, max_bytes=500)
    assert exc.value.rule == "max_bytes"


@pytest.mark.parametrize(
    "params", [{"scale": "batch"}, {"kl": {"coef": 0.1, "centered": True}}], ids=["scale-batch", "kl-centered"]
)
def test_batch_wide_params_are_never_split(admin: Client, params: dict[str, Any]) -> None:
    groups = batch(groups=4)
    whole = admin.distill_advantages("rloo", groups, params=params)
    assert admin.distill_advantages_batched("rloo", groups, params=params).trajectories == whole.trajectories
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("rloo", groups, params=params, max_tokens=SPLIT)
    assert exc.value.rule == "batch_wide" and "would change" in str(exc.value)
    # per group, the same numbers again: a split with group scale is allowed
    assert admin.distill_advantages_batched("rloo", groups, max_tokens=SPLIT).trajectories == (
        admin.distill_advantages("rloo", groups).trajectories
    )


def test_duplicates_across_requests_are_refused(admin: Client) -> None:
    groups = batch(groups=3)
    groups[2]["trajectories"][0]["id"] = groups[0]["trajectories"][1]["id"]
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("grpo", groups, max_tokens=SPLIT)
    assert exc.value.field == "groups[2].trajectories[0].id"
    groups[2]["group_id"] = "group-0"
    with pytest.raises(errors.InvalidInput) as exc:
        admin.distill_advantages_batched("grpo", groups)
    assert exc.value.field == "groups[2].group_id"
