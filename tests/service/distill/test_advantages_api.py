"""POST /v1/distill/advantages through the app (both engine params; the route has no
database state): a batch shaped as a verl / OpenRLHF trainer sends it, each method on
a case computed by hand, bad input as a 4xx naming the field and the rule, the
limits, permissions, determinism and independence from the order of the batch."""

from __future__ import annotations

import copy
import json
import math
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.conftest import ADMIN_KEY, make_settings

URL = "/v1/distill/advantages"


def member(id: str, reward: float, student: list[float], teacher: Any, **fields: Any) -> dict[str, Any]:
    return {"id": id, "reward": reward, "logprobs": {"student": student, "teacher": teacher}, **fields}


def small_batch() -> dict[str, Any]:
    """Three groups of two; one token each, r = teacher - student."""
    groups = []
    for g in range(3):
        groups.append(
            {
                "group_id": f"g{g}",
                "trajectories": [
                    member(f"t{g}a", 1.0, [-1.0, -2.0], [-0.5, -2.5]),
                    member(f"t{g}b", 0.0, [-1.0, -1.0], [-1.5, -1.0]),
                ],
            }
        )
    return {"method": "token_signal", "params": {"beta": 0.5}, "groups": groups}


def post(client: TestClient, body: Any) -> Any:
    if isinstance(body, str):
        return client.post(URL, content=body, headers={"content-type": "application/json"})
    return client.post(URL, json=body)


def verl_batch() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a verl / OpenRLHF trainer has after its rollouts: 2 prompts × 4 rollouts
    (group id = the prompt's uid), responses padded to one length with response_mask
    0 on padding and on tool output tokens, per-token log-probs as float32 `.tolist()`
    gives them, token_steps from the turn boundaries, the binary outcome reward."""
    rng = np.random.default_rng(7)
    width = 12
    groups = []
    raw = []
    for _prompt in range(2):
        uid = str(uuid.UUID(int=int(rng.integers(0, 2**63))))
        trajectories = []
        for k in range(4):
            length = int(rng.integers(6, width + 1))
            mask = [1] * length + [0] * (width - length)
            mask[2] = 0  # a tool output inside the response
            steps = [0] * 3 + [1] * (width - 3)
            student = (-rng.exponential(1.0, width)).astype(np.float32)
            teacher = (student + rng.normal(0, 0.5, width)).astype(np.float32)
            teacher = np.minimum(teacher, 0).astype(np.float32)
            t = {
                "id": f"{uid}-{k}",
                "reward": float(k % 2),
                "token_steps": steps,
                "mask": mask,
                "logprobs": {"student": student.tolist(), "teacher": {"memory": teacher.tolist()}},
            }
            trajectories.append(t)
            raw.append({"student": student.astype(np.float64), "teacher": teacher.astype(np.float64), "mask": mask})
        groups.append({"group_id": uid, "trajectories": trajectories})
    body = {
        "method": "token_signal",
        "params": {"teacher": "memory", "beta": 0.1, "clip": 2.0, "discount": 0.9},
        "groups": groups,
    }
    return body, raw


def test_a_verl_shaped_batch(client: TestClient) -> None:
    body, raw = verl_batch()
    text = json.dumps(body)  # floats as JSON, as the trainer's json.dumps writes them
    r = post(client, text)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [t["id"] for t in out["trajectories"]] == [t["id"] for g in body["groups"] for t in g["trajectories"]]
    for got, sent in zip(out["trajectories"], raw, strict=True):
        assert len(got["advantages"]) == len(got["token_rewards"]) == 12  # aligned with the padded response
        mask = np.array(sent["mask"], dtype=bool)
        assert all(a == 0.0 for a, m in zip(got["advantages"], mask, strict=True) if not m)
        # by hand: r = clip(teacher - student, -2, 2); R_t = Σ γ^k r over later unmasked tokens;
        # A = GRPO over R = [0, 1, 0, 1] (±0.5 / sample std 0.57735 -> ±0.866025); A_t = A + 0.1·R_t
        r_t = np.clip(sent["teacher"] - sent["student"], -2, 2)[mask]
        future = np.zeros_like(r_t)
        acc = 0.0
        for i in range(len(r_t) - 1, -1, -1):
            acc = r_t[i] + 0.9 * acc
            future[i] = acc
        a = got["advantage"]
        assert abs(a) == pytest.approx(0.5 / math.sqrt(1 / 3) / (1 + 1e-6 / math.sqrt(1 / 3)), rel=1e-9)
        np.testing.assert_allclose(np.array(got["advantages"])[mask], a + 0.1 * future, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.array(got["token_rewards"])[mask], r_t, rtol=1e-12)
    batch = out["diagnostics"]["batch"]
    assert batch["trajectories"] == 8 and batch["groups"] == 2 and batch["method"] == "token_signal"
    assert out["params"]["clip"] == 2.0 and out["params"]["teacher"] == "memory" and out["params"]["std"] is True
    assert [g["group_id"] for g in out["diagnostics"]["groups"]] == [g["group_id"] for g in body["groups"]]
    assert 0 <= batch["order_consistency"] <= 1 and batch["order_pairs"] == 8  # 2 groups × 2 × 2 pairs
    assert set(batch["token_reward"]) == {"mean", "std", "min", "p1", "p5", "p25", "p50", "p75", "p95", "p99", "max"}


def test_grpo_by_hand(client: TestClient) -> None:
    # R = [1, 0, 0]: A = [0.666667, -0.333333, -0.333333] / (0.577350 + 1e-6)
    body = {
        "method": "grpo",
        "groups": [
            {
                "group_id": "g",
                "trajectories": [
                    {"id": "a", "reward": 1, "mask": [1, 0]},
                    {"id": "b", "reward": 0},
                    {"id": "c", "reward": 0},
                ],
            }
        ],
    }
    out = post(client, body).json()
    a, b, c = out["trajectories"]
    assert a["advantage"] == pytest.approx(1.154698, abs=1e-6) and a["advantages"] == [a["advantage"], 0.0]
    assert b["advantage"] == pytest.approx(-0.577349, abs=1e-6) and b["advantages"] == []  # no tokens sent
    assert a["token_rewards"] is None and a["step_signal"] is None


def test_step_shaping_by_hand(client: TestClient) -> None:
    # tests/service/distill/signals/test_advantages_step_shaping.py: g = [0.3, -3.0, -0.6], d = [0.15, -0.5, -0.3],
    # budget 0.5 < 0.95: d·0.5/0.95; A = 2 -> [2.157895, 2.157895, 1.473684, 0, 1.684211]
    student = [-1.0] * 5
    teacher = [-0.8, -0.6, -4.0, 8.0, -1.6]
    body = {
        "method": "step_shaping",
        "params": {"lambda": 0.5, "alpha": 1.0, "budget": 0.5},
        "groups": [
            {
                "group_id": "g",
                "trajectories": [
                    member(
                        "a", 1.0, student, teacher, token_steps=[0, 0, 1, 1, 2], mask=[1, 1, 1, 0, 1], advantages=2.0
                    )
                ],
            }
        ],
    }
    t = post(client, body).json()["trajectories"][0]
    assert t["advantages"] == pytest.approx([2.157895, 2.157895, 1.473684, 0.0, 1.684211], abs=1e-6)
    assert t["steps"] == [0, 1, 2] and t["step_signal"] == pytest.approx([0.3, -3.0, -0.6])
    assert t["token_rewards"] == pytest.approx([0.2, 0.4, -3.0, 0.0, -0.6])


def test_horizon_agreement_and_direct_opd_run(client: TestClient) -> None:
    body = small_batch()
    for g in body["groups"]:
        for t in g["trajectories"]:
            t["logprobs"]["teacher"] = {"h1": t["logprobs"]["teacher"], "h4": t["logprobs"]["teacher"]}
    r = post(client, {**body, "method": "horizon_agreement", "params": {"beta": 0.5}})
    assert r.status_code == 200, r.text
    assert r.json()["params"]["horizons"] == ["h1", "h4"]
    for g in body["groups"]:
        for t in g["trajectories"]:
            lp = t["logprobs"]
            t["logprobs"] = {"post": {"rl": lp["teacher"]["h1"]}, "pre": {"rl": lp["student"]}}
    r = post(client, {**body, "method": "direct_opd", "params": {}})
    assert r.status_code == 200, r.text
    assert r.json()["trajectories"][0]["token_rewards"] == [0.5, -0.5]  # post - pre


def error_of(response: Any) -> tuple[int, str, str]:
    e = response.json()["error"]
    return response.status_code, e["field"], e["rule"]


def with_change(path: list[Any], value: Any, body: dict[str, Any] | None = None) -> dict[str, Any]:
    out = copy.deepcopy(body or small_batch())
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


T20 = ["groups", 2, "trajectories", 0]
BAD = {
    "teacher_length": (
        with_change([*T20, "logprobs", "teacher"], [-1.0]),
        "groups[2].trajectories[0].logprobs.teacher",
        "same_length",
    ),
    "mask_length": (with_change([*T20, "mask"], [1, 1, 1]), "groups[2].trajectories[0].mask", "same_length"),
    "steps_length": (with_change([*T20, "token_steps"], [0]), "groups[2].trajectories[0].token_steps", "same_length"),
    "mask_value": (with_change([*T20, "mask"], [1, 2]), "groups[2].trajectories[0].mask[1]", "binary"),
    "mask_type": (with_change([*T20, "mask"], [1, 0.5]), "groups[2].trajectories[0].mask[1]", "int_type"),
    "steps_decrease": (
        with_change([*T20, "token_steps"], [1, 0]),
        "groups[2].trajectories[0].token_steps[1]",
        "non_decreasing",
    ),
    "steps_negative": (
        with_change([*T20, "token_steps"], [-1, 0]),
        "groups[2].trajectories[0].token_steps[0]",
        "non_negative",
    ),
    "positive_logprob": (
        with_change([*T20, "logprobs", "student"], [0.5, -1.0]),
        "groups[2].trajectories[0].logprobs.student[0]",
        "logprob",
    ),
    "string_logprob": (
        with_change([*T20, "logprobs", "student"], [-1.0, "x"]),
        "groups[2].trajectories[0].logprobs.student[1]",
        "float_type",
    ),
    "no_student": (
        with_change([*T20, "logprobs"], {"teacher": [-1.0, -1.0]}),
        "groups[2].trajectories[0].logprobs.student",
        "required",
    ),
    "no_teacher": (
        with_change([*T20, "logprobs"], {"student": [-1.0, -1.0]}),
        "groups[2].trajectories[0].logprobs.teacher",
        "required",
    ),
    "group_of_one": (
        with_change(["groups", 1, "trajectories"], [member("x", 1.0, [-1.0], [-1.0])]),
        "groups[1].trajectories",
        "group_size",
    ),
    "sign_flip_possible": (
        with_change(["params"], {"lambda": 2.0, "alpha": 0.5}, {**small_batch(), "method": "step_shaping"}),
        "params.lambda",
        "sign_preserving",
    ),
    "unknown_method": (with_change(["method"], "ppo"), "method", "literal_error"),
    "unknown_param": (with_change(["params"], {"gamma": 0.9}), "params.gamma", "extra_forbidden"),
    "param_range": (with_change(["params"], {"discount": 1.5}), "params.discount", "less_than_equal"),
    "unknown_teacher": (with_change(["params"], {"teacher": "oracle"}), "params.teacher", "known_teacher"),
    "duplicate_id": (with_change([*T20, "id"], "t0a"), "groups[2].trajectories[0].id", "unique"),
    "duplicate_group": (with_change(["groups", 2, "group_id"], "g0"), "groups[2].group_id", "unique"),
    "unknown_field": (with_change([*T20, "logprob"], [-1.0]), "groups[2].trajectories[0].logprob", "extra_forbidden"),
    "no_groups": (with_change(["groups"], []), "groups", "too_short"),
    "negative_entropy": (
        with_change([*T20, "teacher_entropy"], [0.5, -1.0]),
        "groups[2].trajectories[0].teacher_entropy[1]",
        "non_negative",
    ),
    "ragged_topk": (
        with_change([*T20, "teacher_topk"], {"teacher": [[-0.1, -2.0], [-0.1]], "student": [[-1.0, -1.0], [-1.0]]}),
        "groups[2].trajectories[0].teacher_topk.teacher",
        "rectangular",
    ),
    "topk_k_mismatch": (
        with_change([*T20, "teacher_topk"], {"teacher": [[-0.1, -2.0]] * 2, "student": [[-1.0]] * 2}),
        "groups[2].trajectories[0].teacher_topk.student",
        "same_length",
    ),
    "topk_length": (
        with_change([*T20, "teacher_topk"], {"teacher": [[-0.1]], "student": [[-1.0]]}),
        "groups[2].trajectories[0].teacher_topk.teacher",
        "same_length",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_the_field_and_the_rule(client: TestClient, case: str) -> None:
    body, field, rule = BAD[case]
    r = post(client, body)
    assert r.status_code == 422, r.text
    assert error_of(r) == (422, field, rule), r.text
    assert field in r.json()["error"]["message"] or r.json()["error"]["message"].startswith(field.split("[")[0])


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_with_their_path(client: TestClient, literal: str) -> None:
    text = json.dumps(small_batch()).replace("-2.5", literal, 1)  # groups[0].trajectories[0].logprobs.teacher[1]
    r = post(client, text)
    assert error_of(r) == (422, "groups[0].trajectories[0].logprobs.teacher[1]", "finite_number")


def test_the_entropy_rule_through_the_api(client: TestClient) -> None:
    # tests/service/distill/signals/test_advantages_token_signal.py: top-2 teacher [0.4, 0.4] (H = ln 2 > 0.5), the
    # student's [0.6, 0.2] of those tokens: forward KL 0.143841, r = 0.3 - 0.143841; the second
    # trajectory sends only entropies: r·τ/H = 1.0·0.5/2
    body = small_batch()
    body["params"] = {"entropy_threshold": 0.5, "outcome": False}
    body["groups"] = [
        {
            "group_id": "g",
            "trajectories": [
                member(
                    "a",
                    1.0,
                    [-1.0],
                    [-0.7],
                    teacher_topk={"teacher": [[math.log(0.4)] * 2], "student": [[math.log(0.6), math.log(0.2)]]},
                ),
                member("b", 0.0, [-2.0], [-1.0], teacher_entropy=[2.0]),
            ],
        }
    ]
    out = post(client, body).json()
    a, b = out["trajectories"]
    assert a["token_rewards"] == pytest.approx([0.156159], abs=1e-6) and a["advantages"] == a["token_rewards"]
    assert b["token_rewards"] == [0.25] and b["advantage"] == 0.0
    assert out["diagnostics"]["batch"]["entropy_tokens_share"] == 1.0


def test_named_teachers_of_different_lengths_name_the_teacher(client: TestClient) -> None:
    body = with_change([*T20, "logprobs", "teacher"], {"h1": [-1.0, -1.0], "h4": [-1.0]})
    r = post(client, {**body, "method": "horizon_agreement", "params": {}})
    assert error_of(r) == (422, "groups[2].trajectories[0].logprobs.teacher.h4", "same_length")


@pytest.fixture
def small_limits(settings: Settings, tmp_path: Path) -> Any:
    limited = make_settings(
        settings.database_url,  # type: ignore[arg-type]
        tmp_path,
        limits={"max_advantage_tokens": 10, "max_advantage_group_size": 3},
    )
    with TestClient(create_app(limited), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        yield c


def test_the_batch_is_bounded(small_limits: TestClient) -> None:
    body = small_batch()
    body["groups"] = body["groups"][:2]  # 8 tokens
    assert post(small_limits, body).status_code == 200
    body = small_batch()  # 3 groups × 2 trajectories × 2 tokens = 12 > 10
    assert error_of(post(small_limits, body)) == (422, "groups", "max_advantage_tokens")
    big = with_change(["groups", 0, "trajectories"], [member(f"m{i}", 1.0, [-1.0], [-1.0]) for i in range(4)])
    big["groups"] = big["groups"][:1]
    assert error_of(post(small_limits, big)) == (422, "groups[0].trajectories", "max_advantage_group_size")


def test_permissions(client: TestClient) -> None:
    def key(role: str) -> dict[str, str]:
        r = client.post("/v1/keys", json={"role": role, "namespaces": ["*"]})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['key']}"}

    assert client.post(URL, json=small_batch(), headers=key("trainer")).status_code == 200
    r = client.post(URL, json=small_batch(), headers=key("agent"))
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
    assert client.post(URL, json=small_batch(), headers=key("operator")).status_code == 403
    assert client.post(URL, json=small_batch(), headers={"Authorization": "Bearer nope"}).status_code == 401


def test_deterministic_and_independent_of_the_order_of_the_batch(client: TestClient) -> None:
    body = small_batch()
    body["params"] = {"beta": 0.5, "clip": 0.4, "discount": 0.5}
    one, two = post(client, body), post(client, body)
    assert one.status_code == 200 and one.content == two.content
    shuffled = copy.deepcopy(body)
    shuffled["groups"] = shuffled["groups"][::-1]
    for g in shuffled["groups"]:
        g["trajectories"] = g["trajectories"][::-1]
    three = post(client, shuffled).json()
    by_id = {t["id"]: t for t in one.json()["trajectories"]}
    for t in three["trajectories"]:
        assert t == by_id[t["id"]]
    first, second = one.json()["diagnostics"], three["diagnostics"]
    assert first["batch"] == second["batch"]
    assert sorted(first["groups"], key=lambda g: g["group_id"]) == sorted(second["groups"], key=lambda g: g["group_id"])


def test_the_route_is_in_the_openapi_document(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"][URL]["post"]
    assert op["operationId"] == "distill_advantages"


# --- rloo, scale, the conventions, the KL penalty, the off-policy weights -----------------------------------------


def off_policy_batch() -> dict[str, Any]:
    """tests/service/distill/signals/test_advantages_off_policy.py's cases: student [-1, -0.5, -2, -0.3],
    rollout [-1.2, -1.5, -1.9, -0.3], ref [-1.5, -0.5, -1, -9], the last token masked; a sibling without
    its own A."""
    a = {
        "id": "a",
        "reward": 1.0,
        "mask": [1, 1, 1, 0],
        "advantages": 1.0,
        "logprobs": {
            "student": [-1.0, -0.5, -2.0, -0.3],
            "rollout": [-1.2, -1.5, -1.9, -0.3],
            "ref": [-1.5, -0.5, -1.0, -9.0],
        },
    }
    b = {"id": "b", "reward": 0.0, "logprobs": {"student": [-1.0], "rollout": [-1.0], "ref": [-1.0]}}
    return {"method": "grpo", "params": {}, "groups": [{"group_id": "g", "trajectories": [a, b]}]}


def test_rloo_through_the_api(client: TestClient) -> None:
    # R = [1, 0, 0]: A = [1 - 0, 0 - 1/2, 0 - 1/2]
    body = {
        "method": "rloo",
        "groups": [{"group_id": "g", "trajectories": [{"id": str(i), "reward": r} for i, r in enumerate([1, 0, 0])]}],
    }
    r = post(client, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [t["advantage"] for t in out["trajectories"]] == [1.0, -0.5, -0.5]
    assert out["params"]["scale"] == "none" and out["params"]["std"] is False
    body["params"] = {"scale": "batch"}  # one group: the batch std is the group's, 1/sqrt(3)
    a = [t["advantage"] for t in post(client, body).json()["trajectories"]]
    assert a == pytest.approx([1.732048, -0.866024, -0.866024], abs=1e-6)


def test_batch_scale_singletons_and_null_rewards_through_the_api(client: TestClient) -> None:
    def trajectories(*rewards: float | None) -> list[dict[str, Any]]:
        return [{"id": f"{uuid.uuid4()}", "reward": r, "mask": [1]} for r in rewards]

    body = {
        "method": "grpo",
        "params": {"scale": "batch"},
        "groups": [
            {"group_id": "a", "trajectories": trajectories(1.0, 0.0)},
            {"group_id": "b", "trajectories": trajectories(2.0, 4.0)},
        ],
    }
    a = [t["advantage"] for t in post(client, body).json()["trajectories"]]
    assert a == pytest.approx([0.292770, -0.292770, -0.585540, 0.585540], abs=1e-6)
    body = {
        "method": "grpo",
        "params": {"singleton_groups": "verl", "null_rewards": "trl"},
        "groups": [
            {"group_id": "a", "trajectories": trajectories(2.0)},
            {"group_id": "b", "trajectories": trajectories(1.0, None, 0.0, 0.0)},
        ],
    }
    r = post(client, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [t["advantage"] for t in out["trajectories"]] == pytest.approx(
        [1.999998, 1.154698, 0.0, -0.577349, -0.577349], abs=1e-6
    )
    assert out["trajectories"][2]["advantages"] == [0.0]
    assert out["diagnostics"]["batch"]["null_rewards"] == 1
    assert out["diagnostics"]["groups"][1]["reward_mean"] == pytest.approx(1 / 3)


def test_kl_and_is_weights_through_the_api(client: TestClient) -> None:
    body = off_policy_batch()
    body["params"] = {
        "kl": {"coef": 0.5, "estimator": "k3", "centered": True},
        "is": {"mode": "tis", "level": "token", "cap": 2.0},
    }
    r = post(client, body)
    assert r.status_code == 200, r.text
    out = r.json()
    a, b = out["trajectories"]
    # k3 of d = [0.5, 0, -1] and of b's d = 0: [0.106531, 0, 0.718282, 0]: mean over the 4 unmasked tokens 0.206203;
    # centred: [-0.099672, -0.206203, 0.512079], b: -0.206203; a: 1 - 0.5·kl; b: A = -0.707106 + 0.5·0.206203
    assert a["kl"] == pytest.approx([-0.099672, -0.206203, 0.512079, 0.0], abs=1e-6)
    assert a["advantages"] == pytest.approx([1.049836, 1.103102, 0.743960, 0.0], abs=1e-6)
    assert b["advantages"] == pytest.approx([-0.707106 + 0.103102], abs=1e-6)
    # ρ = exp([0.2, 1.0, -0.1]) capped at 2; b: exp(0) = 1
    assert a["is_weights"] == pytest.approx([1.221403, 2.0, 0.904837, 0.0], abs=1e-6) and b["is_weights"] == [1.0]
    batch = out["diagnostics"]["batch"]
    assert batch["kl_mean"] == pytest.approx(0.206203, abs=1e-6)
    assert batch["is_truncated_share"] == 0.25 and batch["is_max_ratio"] == pytest.approx(math.e)
    assert batch["mismatch_kl"] == pytest.approx((0.021403 + 0.718282 + 0.004837) / 4, abs=1e-6)
    assert out["params"]["is"] == {"mode": "tis", "level": "token", "cap": 2.0, "low": None, "high": None}
    assert out["params"]["kl"] == {"coef": 0.5, "estimator": "k3", "centered": True}
    body["params"] = {"is": {"mode": "mis", "level": "sequence"}}  # defaults high 2, low 1/2
    out = post(client, body).json()
    assert out["params"]["is"] == {"mode": "mis", "level": "sequence", "cap": None, "low": 0.5, "high": 2.0}
    assert out["trajectories"][0]["is_weights"] == pytest.approx([1.442917] * 3 + [0.0], abs=1e-6)
    assert out["trajectories"][0]["kl"] is None and out["diagnostics"]["batch"]["is_masked_share"] == 0.0


def test_discount_masked_through_the_api(client: TestClient) -> None:
    body = {
        "method": "token_signal",
        "params": {"discount": 0.5, "outcome": False, "discount_masked": True},
        "groups": [
            {
                "group_id": "g",
                "trajectories": [member("a", 1.0, [-1.0] * 4, [-0.5, -2.0, -0.5, 0.0], mask=[1, 1, 0, 1])],
            }
        ],
    }
    # r = [0.5, -1, (masked), 1]: R_3 = 1, R_2 = 0.5, R_1 = -1 + 0.25 = -0.75, R_0 = 0.5 - 0.375 = 0.125
    assert post(client, body).json()["trajectories"][0]["advantages"] == [0.125, -0.75, 0.0, 1.0]


OP = ["groups", 0, "trajectories", 0]
OFF_POLICY_BAD = {
    "rollout_length": (
        with_change([*OP, "logprobs", "rollout"], [-1.0], off_policy_batch()),
        {"is": {"mode": "tis"}},
        "groups[0].trajectories[0].logprobs.rollout",
        "same_length",
    ),
    "ref_length": (
        with_change([*OP, "logprobs", "ref"], [-1.0] * 5, off_policy_batch()),
        {"kl": {"coef": 1.0}},
        "groups[0].trajectories[0].logprobs.ref",
        "same_length",
    ),
    "positive_rollout": (
        with_change([*OP, "logprobs", "rollout"], [-1.0, 0.5, -1.0, -1.0], off_policy_batch()),
        {"is": {"mode": "tis"}},
        "groups[0].trajectories[0].logprobs.rollout[1]",
        "logprob",
    ),
    "positive_ref": (
        with_change([*OP, "logprobs", "ref"], [-1.0, -1.0, 2.0, -1.0], off_policy_batch()),
        {"kl": {"coef": 1.0}},
        "groups[0].trajectories[0].logprobs.ref[2]",
        "logprob",
    ),
    "is_without_rollout": (
        with_change([*OP, "logprobs"], {"student": [-1.0] * 4}, off_policy_batch()),
        {"is": {"mode": "mis"}},
        "groups[0].trajectories[0].logprobs.rollout",
        "required",
    ),
    "kl_without_ref": (
        with_change(["groups", 0, "trajectories", 1, "logprobs"], {"student": [-1.0]}, off_policy_batch()),
        {"kl": {"coef": 1.0}},
        "groups[0].trajectories[1].logprobs.ref",
        "required",
    ),
    "is_without_student": (
        with_change([*OP, "logprobs"], {"rollout": [-1.0] * 4}, off_policy_batch()),
        {"is": {"mode": "tis"}},
        "groups[0].trajectories[0].logprobs.student",
        "required",
    ),
    "unknown_estimator": (
        off_policy_batch(),
        {"kl": {"coef": 1.0, "estimator": "k4"}},
        "params.kl.estimator",
        "literal_error",
    ),
    "kl_without_coef": (off_policy_batch(), {"kl": {"estimator": "k1"}}, "params.kl.coef", "missing"),
    "unknown_mode": (off_policy_batch(), {"is": {"mode": "pis"}}, "params.is.mode", "literal_error"),
    "unknown_level": (off_policy_batch(), {"is": {"mode": "tis", "level": "turn"}}, "params.is.level", "literal_error"),
    "zero_cap": (off_policy_batch(), {"is": {"mode": "tis", "cap": 0}}, "params.is.cap", "greater_than"),
    "low_above_high": (
        off_policy_batch(),
        {"is": {"mode": "mis", "low": 3.0, "high": 2.0}},
        "params.is.low",
        "low_le_high",
    ),
    "cap_with_mis": (off_policy_batch(), {"is": {"mode": "mis", "cap": 2.0}}, "params.is.cap", "mode_param"),
    "std_against_scale": (off_policy_batch(), {"std": False, "scale": "batch"}, "params.scale", "consistent"),
    "unknown_scale": (off_policy_batch(), {"scale": "token"}, "params.scale", "literal_error"),
    "null_reward": (
        with_change([*OP, "reward"], None, off_policy_batch()),
        {},
        "groups[0].trajectories[0].reward",
        "required",
    ),
    "singleton_by_default": (
        with_change(
            ["groups", 0, "trajectories"], off_policy_batch()["groups"][0]["trajectories"][1:], off_policy_batch()
        ),
        {},
        "groups[0].trajectories",
        "group_size",
    ),
    "discount_masked_on_grpo": (
        off_policy_batch(),
        {"discount_masked": True},
        "params.discount_masked",
        "extra_forbidden",
    ),
}


@pytest.mark.parametrize("case", sorted(OFF_POLICY_BAD))
def test_bad_off_policy_input_names_the_field_and_the_rule(client: TestClient, case: str) -> None:
    body, params, field, rule = OFF_POLICY_BAD[case]
    r = post(client, {**body, "params": params})
    assert r.status_code == 422, r.text
    assert error_of(r) == (422, field, rule), r.text


@pytest.mark.parametrize("literal", ["NaN", "Infinity"])
def test_a_non_finite_rollout_or_ref_logprob_is_refused_with_its_path(client: TestClient, literal: str) -> None:
    body = off_policy_batch()
    body["params"] = {"is": {"mode": "tis"}, "kl": {"coef": 1.0}}
    text = json.dumps(body).replace("-1.9", literal, 1)  # groups[0].trajectories[0].logprobs.rollout[2]
    assert error_of(post(client, text)) == (422, "groups[0].trajectories[0].logprobs.rollout[2]", "finite_number")
    text = json.dumps(body).replace("-9.0", literal, 1)  # groups[0].trajectories[0].logprobs.ref[3]
    assert error_of(post(client, text)) == (422, "groups[0].trajectories[0].logprobs.ref[3]", "finite_number")
