"""``distill_advantages_arrays`` (the binary body of POST /v1/distill/advantages,
reflexa.binary_advantages) against a real server (uvicorn over HTTP on SQLite),
sync and async: float32 and float64 arrays, int and bool masks, named teachers and
the off-policy inputs give ``distill_advantages``'s (JSON) numbers to the bit; a
bad array is the server's InvalidInput naming the field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from reflexa import AsyncClient, Client, errors
from reflexa.binary_advantages import decode_response, encode_request

RNG = np.random.default_rng(3)


def arrays_batch(floats: Any = np.float32, mask_dtype: Any = np.int64) -> list[dict[str, Any]]:
    """2 groups × 3 rollouts of 5-9 tokens, two steps, a masked tool token; log-probs as a trainer holds them."""
    groups = []
    for g in range(2):
        trajectories = []
        for i in range(3):
            n = int(RNG.integers(5, 10))
            student = -RNG.exponential(0.7, n)
            mask = np.ones(n, dtype=mask_dtype)
            mask[2] = 0
            trajectories.append(
                {
                    "id": f"g{g}-{i}",
                    "reward": float(i == 0),
                    "mask": mask,
                    "token_steps": np.repeat([0, 1], [3, n - 3]),
                    "logprobs": {
                        "student": student.astype(floats),
                        "rollout": (student - 0.1).astype(floats),
                        "ref": np.minimum(student + RNG.normal(0, 0.2, n), 0).astype(floats),
                        "teacher": {
                            h: np.minimum(student + RNG.normal(0, 0.5, n), 0).astype(floats) for h in ("h1", "h4")
                        },
                    },
                }
            )
        groups.append({"group_id": f"group-{g}", "trajectories": trajectories})
    return groups


def as_lists(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v.tolist() if hasattr(v, "tolist") else v

    return plain(groups)  # type: ignore[no-any-return]


CASES = {
    "token_signal, float32, int mask": ("token_signal", {"teacher": "h4", "clip": 1.0, "discount": 0.9}, {}),
    "horizon_agreement, float64, bool mask": (
        "horizon_agreement",
        {"beta": 0.5},
        {"floats": np.float64, "mask_dtype": np.bool_},
    ),
    "grpo with kl and is": ("grpo", {"kl": {"coef": 0.1, "estimator": "k3"}, "is": {"mode": "tis"}}, {}),
    "step_shaping, uint8 mask": ("step_shaping", {"teacher": "h1"}, {"mask_dtype": np.uint8}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_arrays_give_the_json_numbers_to_the_bit(admin: Client, case: str) -> None:
    method, params, kinds = CASES[case]
    groups = arrays_batch(**kinds)
    answer = admin.distill_advantages_arrays(method, groups, params=params)  # type: ignore[arg-type]
    by_json = admin.distill_advantages(method, as_lists(groups), params=params)  # type: ignore[arg-type]
    assert answer.response["diagnostics"] == by_json.model_dump(mode="json")["diagnostics"]
    for t, want in enumerate(by_json.trajectories):
        got = answer.trajectory(t)
        assert got["id"] == want.id and got["advantage"] == want.advantage
        for field in ("advantages", "token_rewards", "is_weights", "kl"):
            expected = getattr(want, field)
            if expected is None:
                assert got[field] is None
            else:
                assert got[field].dtype == np.float64
                assert got[field].tobytes() == np.asarray(expected, dtype=np.float64).tobytes(), field


def test_a_bad_array_is_the_servers_invalid_input(admin: Client) -> None:
    groups = arrays_batch()
    groups[1]["trajectories"][2]["logprobs"]["student"][4] = 0.5  # a log-probability above 0
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages_arrays("token_signal", groups, params={"teacher": "h1"})
    assert caught.value.field == "groups[1].trajectories[2].logprobs.student[4]"
    groups = arrays_batch()
    groups[0]["trajectories"][1]["logprobs"]["student"][0] = np.nan
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages_arrays("token_signal", groups, params={"teacher": "h1"})
    assert caught.value.field == "groups[0].trajectories[1].logprobs.student[0]"
    assert caught.value.rule == "finite_number"


def test_a_field_not_every_trajectory_sends_stays_json(admin: Client) -> None:
    groups = arrays_batch()
    entropy = np.full(len(groups[0]["trajectories"][0]["mask"]), 0.5, dtype=np.float32)
    groups[0]["trajectories"][0]["teacher_entropy"] = entropy  # one trajectory only: in the header, as a list
    raw = encode_request("token_signal", groups, {"teacher": "h1"})
    assert b'"teacher_entropy":[0.5,' in raw
    answer = admin.distill_advantages_arrays("token_signal", groups, params={"teacher": "h1"})
    by_json = admin.distill_advantages("token_signal", as_lists(groups), params={"teacher": "h1"})
    assert answer.advantages.tobytes() == np.concatenate([t.advantages for t in by_json.trajectories]).tobytes()


def test_decode_refuses_what_is_not_the_layout() -> None:
    with pytest.raises(ValueError):
        decode_response(b"{}")


@pytest.mark.anyio
async def test_async(live_server: Any) -> None:
    groups = arrays_batch()
    async with AsyncClient(live_server.url, live_server.admin_key) as client:
        answer = await client.distill_advantages_arrays("grpo", groups)
        by_json = await client.distill_advantages("grpo", as_lists(groups))
    assert answer.advantages.tobytes() == np.concatenate([t.advantages for t in by_json.trajectories]).tobytes()
