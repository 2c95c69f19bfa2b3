"""``distill_advantages`` (POST /v1/distill/advantages) against a real server
(``live_server``: uvicorn over HTTP on SQLite), sync and async: GRPO and SEED's
token signal worked by hand (docs/distillation.md), models and plain mappings
mixed, ``params`` nulls sent as values, what the client refuses before sending,
and the server's 422s arriving as ``InvalidInput`` naming the field path."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from reflexa import AsyncClient, Client, errors, models

TOL = 1e-6
# GRPO with R = [1, 0, 0]: mean 1/3, sample std sqrt(1/3) = 0.577350, so
# A = (R - 1/3) / (0.577350 + 1e-6) (docs/distillation.md, test_grpo_with_the_std_by_hand).
GRPO_A = [(2 / 3) / (math.sqrt(1 / 3) + 1e-6), (-1 / 3) / (math.sqrt(1 / 3) + 1e-6)]


def close(got: list[float] | float | None, want: list[float] | float) -> bool:
    if isinstance(want, float):
        return got is not None and not isinstance(got, list) and abs(got - want) <= TOL
    assert isinstance(got, list)
    return len(got) == len(want) and all(abs(a - b) <= TOL for a, b in zip(got, want, strict=True))


def grpo_group() -> list[Any]:
    """One group of three siblings, R = [1, 0, 0], a trajectory model among plain
    mappings; b's middle token is masked (its advantage is 0 and it counts nowhere)."""
    a = models.AdvantageTrajectory(id="a", reward=1.0, mask=[1, 1], token_steps=[0, 1])
    b = {"id": "b", "reward": 0, "mask": [1, 0, 1]}
    c = {"id": "c", "reward": 0.0, "mask": (1,)}
    return [{"group_id": "g", "trajectories": [a, b, c]}]


def check_grpo(answer: models.AdvantagesResponse) -> None:
    assert answer.method == "grpo"
    assert answer.params == {
        "std": True,
        "eps": 1e-6,
        "scale": "group",
        "singleton_groups": "refuse",
        "null_rewards": "refuse",
        "kl": None,
        "is": None,
    }
    assert [(t.id, t.group_id) for t in answer.trajectories] == [("a", "g"), ("b", "g"), ("c", "g")]
    a, b, c = answer.trajectories
    up, down = GRPO_A
    assert close(a.advantage, up) and close(b.advantage, down) and close(c.advantage, down)
    assert close(a.advantages, [up, up])
    assert b.advantages[1] == 0.0 and close(b.advantages, [down, 0.0, down])
    assert close(c.advantages, [down])
    assert a.token_rewards is None  # grpo has no token signal
    batch = answer.diagnostics.batch
    assert (batch.trajectories, batch.groups, batch.tokens, batch.trainer_advantages) == (3, 1, 5, 0)
    assert batch.steps == 4  # a's two steps, b's and c's one each
    assert batch.sign_flips == 0
    assert batch.advantages is not None and close(batch.advantages.max, up) and close(batch.advantages.min, down)
    [group] = answer.diagnostics.groups
    assert (group.group_id, group.trajectories, group.tokens) == ("g", 3, 5)
    assert close(group.reward_mean, 1 / 3) and close(group.reward_std, math.sqrt(1 / 3))


def test_grpo_by_hand(admin: Client) -> None:
    check_grpo(admin.distill_advantages("grpo", grpo_group()))
    # The same group as a model: the same answer.
    check_grpo(admin.distill_advantages("grpo", [models.AdvantageGroup.model_validate(grpo_group()[0])]))


def test_grpo_without_the_std(admin: Client) -> None:
    answer = admin.distill_advantages("grpo", grpo_group(), params={"std": False})
    assert answer.params["std"] is False
    assert [t.advantage for t in answer.trajectories] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=TOL)


def test_rloo_with_off_policy_weights_and_a_kl_penalty(admin: Client) -> None:
    """R = [1, 0, 0]: rloo A = [1, -0.5, -0.5]; a's student [-1, -0.5] against rollout
    [-1.2, -1.5]: ρ = exp([0.2, 1]) = [1.221403, 2.718282], tis cap 2; against ref
    [-1.5, -0.5]: k1 = [0.5, 0], coef 0.5: a's advantages 1 - [0.25, 0]."""
    lp = {"student": [-1.0, -0.5], "rollout": [-1.2, -1.5], "ref": [-1.5, -0.5]}
    a = models.AdvantageTrajectory(id="a", reward=1.0, logprobs=models.Logprobs(**lp))
    b = {"id": "b", "reward": 0.0, "logprobs": {"student": [-1.0], "rollout": [-1.0], "ref": [-1.0]}}
    c = {"id": "c", "reward": 0.0, "logprobs": {"student": [], "rollout": [], "ref": []}}
    answer = admin.distill_advantages(
        "rloo",
        [{"group_id": "g", "trajectories": [a, b, c]}],
        params={"is": {"mode": "tis"}, "kl": {"coef": 0.5}},
    )
    ta, tb, tc = answer.trajectories
    assert [ta.advantage, tb.advantage, tc.advantage] == [1.0, -0.5, -0.5]
    assert close(ta.is_weights, [1.221403, 2.0]) and tb.is_weights == [1.0] and tc.is_weights == []
    assert close(ta.kl, [0.5, 0.0]) and close(ta.advantages, [0.75, 1.0])
    assert answer.params["scale"] == "none" and answer.params["is"]["cap"] == 2.0
    assert answer.diagnostics.batch.is_truncated_share is not None and close(
        answer.diagnostics.batch.is_truncated_share, 1 / 3
    )


def test_token_signal_by_hand(admin: Client) -> None:
    """student [-1, -2, -0.5], teacher [-0.5, -3, -0.5]: r = [0.5, -1, 0]; the trainer's
    own A = 1 (a group of one needs it), beta 0.5: A_t = 1 + 0.5 r = [1.25, 0.5, 1]."""
    traj = {
        "id": "s1",
        "reward": 1.0,
        "advantages": 1.0,
        "logprobs": {"student": [-1.0, -2.0, -0.5], "teacher": {"memory": [-0.5, -3.0, -0.5]}},
    }
    answer = admin.distill_advantages("token_signal", [{"group_id": "g", "trajectories": [traj]}], params={"beta": 0.5})
    [t] = answer.trajectories
    assert close(t.advantages, [1.25, 0.5, 1.0])
    assert close(t.token_rewards, [0.5, -1.0, 0.0])
    assert t.advantage == 1.0
    assert answer.params["teacher"] == "memory" and answer.params["beta"] == 0.5  # the only teacher, resolved
    batch = answer.diagnostics.batch
    assert batch.trainer_advantages == 1 and batch.order_consistency is None  # no sibling pair
    assert batch.token_reward is not None and close(batch.token_reward.min, -1.0)


def test_nulls_in_params_are_sent(live_server: Any) -> None:
    """step_shaping's `budget: null` means no budget (the default is 1): it must reach the server."""
    sent: list[Any] = []
    http = httpx.Client(event_hooks={"request": [lambda r: sent.append(json.loads(r.content))]})
    traj = {"id": "x", "reward": 1.0, "advantages": 2.0, "logprobs": {"student": [-1.0], "teacher": [-0.5]}}
    with Client(live_server.url, live_server.admin_key, http_client=http) as client:
        answer = client.distill_advantages(
            "step_shaping", [{"group_id": "g", "trajectories": [traj]}], params={"budget": None}
        )
    http.close()
    assert sent[0]["params"] == {"budget": None}
    assert answer.params["budget"] is None
    assert [(t.steps, t.step_signal) for t in answer.trajectories] == [([0], [0.5])]


def test_the_client_refuses_a_bad_body_before_sending(live_server: Any) -> None:
    sent: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [sent.append]})
    with Client(live_server.url, live_server.admin_key, http_client=http) as client:
        cases: list[tuple[Any, Any, str]] = [
            ("grpo", [{"group_id": "g", "trajectories": [{"id": "a", "rewrd": 1.0}]}], "groups[0].trajectories[0]"),
            (
                "grpo",
                [{"group_id": "g", "trajectories": [{"id": "a", "reward": "high"}]}],
                "groups[0].trajectories[0].reward",
            ),
            ("grpo", [{"group_id": "bad id!", "trajectories": [{"id": "a", "reward": 1}]}], "groups[0].group_id"),
            ("grpo", [{"group_id": "g", "trajectories": []}], "groups[0].trajectories"),
            ("grpo", {"group_id": "g", "trajectories": []}, "groups"),
            ("grpo", [], "groups"),
            ("grpoo", [{"group_id": "g", "trajectories": [{"id": "a", "reward": 1}]}], "method"),
        ]
        for method, groups, field in cases:
            with pytest.raises(errors.InvalidInput) as caught:
                client.distill_advantages(method, groups)
            assert caught.value.field is not None and caught.value.field.startswith(field), (field, caught.value)
        nan = [{"group_id": "g", "trajectories": [{"id": "a", "reward": float("nan")}]}]
        with pytest.raises(errors.InvalidInput) as caught:
            client.distill_advantages("grpo", nan)
        assert caught.value.field == "groups[0].trajectories[0].reward"
    http.close()
    assert sent == []


def test_the_servers_422_names_the_field(admin: Client) -> None:
    """What only the server can check arrives as InvalidInput with its field path and rule."""
    mismatch = {
        "group_id": "g",
        "trajectories": [
            {"id": "a", "reward": 1.0, "mask": [1, 1], "logprobs": {"student": [-1.0, -2.0, -3.0]}},
            {"id": "b", "reward": 0.0},
        ],
    }
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages("token_signal", [mismatch], params={"outcome": True})
    assert caught.value.status == 422
    assert caught.value.field == "groups[0].trajectories[0].mask"
    assert caught.value.rule == "same_length"

    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages("step_shaping", grpo_group(), params={"lamda": 0.5})
    assert (caught.value.field, caught.value.rule) == ("params.lamda", "extra_forbidden")
    assert "lambda" in str(caught.value)  # the message lists the method's parameters

    alone = [{"group_id": "solo", "trajectories": [{"id": "a", "reward": 1.0}]}]
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages("grpo", alone)
    assert (caught.value.field, caught.value.rule) == ("groups[0].trajectories", "group_size")

    # A log-prob above 0: a negative log-likelihood sent by mistake.
    positive = {"id": "a", "reward": 1.0, "advantages": 1.0, "logprobs": {"student": [0.5], "teacher": [-0.1]}}
    sign = [{"group_id": "g", "trajectories": [positive]}]
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_advantages("token_signal", sign)
    assert caught.value.field is not None and caught.value.field.startswith(
        "groups[0].trajectories[0].logprobs.student"
    )


def test_roles(admin: Client, live_server: Any) -> None:
    """Not namespaced, but a distill permission: a trainer key may, an agent key may not."""
    namespace = admin.create_namespace("advantages-roles").name
    trainer = admin.create_key("trainer", [namespace]).key
    agent = admin.create_key("agent", [namespace]).key
    with Client(live_server.url, trainer) as client:
        check_grpo(client.distill_advantages("grpo", grpo_group()))
    with Client(live_server.url, agent) as client, pytest.raises(errors.Forbidden):
        client.distill_advantages("grpo", grpo_group())


@pytest.mark.anyio
async def test_async(live_server: Any) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key) as client:
        check_grpo(await client.distill_advantages("grpo", grpo_group()))
        with pytest.raises(errors.InvalidInput) as caught:
            await client.distill_advantages("step_shaping", grpo_group(), params={"lamda": 0.5})
        assert caught.value.field == "params.lamda"


def test_a_null_reward_is_sent_as_null() -> None:
    """params.null_rewards "trl": an unscored trajectory goes as `reward: null`, not left out
    (the request body drops other unset optionals)."""
    from reflexa import _operations

    groups = [{"group_id": "g", "trajectories": [{"id": "a", "reward": None}, {"id": "b", "reward": 1}]}]
    body = _operations.distill_advantages("grpo", groups, params={"null_rewards": "trl"}).body
    assert body is not None and json.loads(json.dumps(body))["groups"][0]["trajectories"] == [
        {"id": "a", "reward": None},
        {"id": "b", "reward": 1.0},
    ]
