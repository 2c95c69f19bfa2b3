"""Rubric rewards from the client: the typed methods (sync and async) and the trainer
adapters of reflexa.adapters against a real server — verl's compute_score called
the way verl calls it, TRL reward functions (sync and async) called with the
keyword arguments GRPOTrainer passes, and a GRPOTrainer on a tiny randomly
initialised model training two steps on the CPU with Reflexa's reward_funcs.

verl: verl/workers/reward_manager/naive.py and batch.py, and
verl/experimental/reward_loop/reward_manager/naive.py (volcengine/verl@b178a3cd,
2026-01) call `compute_score(data_source=, solution_str=, ground_truth=,
extra_info=)` (the reward loop adds reward_router_address and
reward_model_tokenizer; the batch manager `compute_score(data_sources=,
solution_strs=, ground_truths=, extra_infos=)`) and read `result["score"]`.
TRL: trl/trainer/grpo_trainer.py (1.16), GRPOTrainer._calculate_rewards.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from reflexa import AsyncClient, Client, adapters, errors, models
from reflexa import _operations as operations

RUBRIC = {
    "name": "arithmetic",
    "criteria": [
        {
            "id": "correct",
            "text": "Ends with the right number.",
            "weight": 3,
            "check": {"type": "regex", "pattern": r"\b{{label}}\W*$"},
        },
        {
            "id": "no_sorry",
            "text": "Does not apologise.",
            "weight": 1,
            "check": {"type": "not_contains", "text": "sorry", "case_sensitive": False},
        },
    ],
}
TOOL_RUBRIC = {
    "name": "uses the calculator",
    "criteria": [
        {"id": "calc", "text": "Calls the calculator.", "weight": 1, "check": {"type": "tool_called", "tool": "calc"}},
        {"id": "correct", "text": "Answers right.", "weight": 1, "check": {"type": "contains", "text": "{{label}}"}},
    ],
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def admin(live_server: Any) -> Iterator[Client]:
    with Client(live_server.url, live_server.admin_key) as client:
        yield client


@pytest.fixture
def namespace(admin: Client) -> str:
    name = unique("rub")
    admin.create_namespace(name)
    admin.create_rubric(name, "arith", RUBRIC["name"], RUBRIC["criteria"])
    admin.create_rubric(name, "tools", TOOL_RUBRIC["name"], TOOL_RUBRIC["criteria"])
    return name


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, live_server: Any, namespace: str) -> str:
    """The adapters configured from the environment, as a trainer's workers are."""
    monkeypatch.setenv("REFLEXA_URL", live_server.url)
    monkeypatch.setenv("REFLEXA_API_KEY", live_server.admin_key)
    monkeypatch.setenv("REFLEXA_NAMESPACE", namespace)
    monkeypatch.setenv("REFLEXA_RUBRIC", "arith")
    monkeypatch.setattr(adapters, "_default", None)
    return namespace


# -- the typed client ------------------------------------------------------------------


def test_client_methods(admin: Client, namespace: str, live_server: Any) -> None:
    rubric = admin.get_rubric(namespace, "arith")
    assert isinstance(rubric, models.Rubric) and [c.id for c in rubric.criteria] == ["correct", "no_sorry"]
    assert admin.create_rubric(namespace, "arith", RUBRIC["name"], RUBRIC["criteria"]) == rubric  # a replay
    with pytest.raises(errors.Conflict) as conflict:
        admin.create_rubric(namespace, "arith", "other", RUBRIC["criteria"])
    assert conflict.value.field == "id"
    with pytest.raises(errors.InvalidInput) as bad:
        admin.create_rubric(
            namespace, "bad", "bad", [{"id": "a", "text": "t", "weight": 1, "check": {"type": "regex", "pattern": "("}}]
        )
    assert (bad.value.field, bad.value.rule) == ("criteria[0].check.pattern", "regex")
    with pytest.raises(errors.NotFound) as missing:
        admin.get_rubric(namespace, "nope")
    assert missing.value.field == "id"

    stored = admin.create_trajectory(
        namespace, task="6 * 7", steps=[{"state": {"observation": "6 * 7?"}, "action": "42"}]
    )
    score = admin.score_rubric(namespace, "arith", stored.id, label=42)
    assert isinstance(score, models.RubricScore) and score.reward == 1.0 and score.trajectory_id == stored.id
    inline = {"task": "6 * 7", "steps": [{"state": {"observation": "6 * 7?"}, "action": "Sorry, 41"}]}
    low = admin.score_rubric(namespace, "arith", inline, label="42")
    assert [c.score for c in low.criteria] == [0.0, 0.0] and low.reward == 0.0
    assert admin.score_rubric(namespace, "arith", inline, label="42", final_answer="it is 42").reward == 1.0
    batch = admin.score_rubric_batch(
        namespace,
        "arith",
        [{"trajectory_id": stored.id, "label": 42}, models.RubricScoreItem(trajectory=inline, label=42)],
    )
    assert [i.reward for i in batch.items] == [1.0, 0.0] and batch.reward_mean == 0.5
    with pytest.raises(errors.InvalidInput) as unlabelled:
        admin.score_rubric_batch(namespace, "arith", [{"trajectory": inline}])
    assert (unlabelled.value.field, unlabelled.value.rule) == ("items[0].label", "label_required")

    cap = admin.create_reward_capability(namespace, "arith", note="run")
    assert cap.path == f"/v1/reward/{cap.secret}"
    r = httpx.post(live_server.url + cap.path, json={"query": ["p: 42"], "prompts": ["p:"], "labels": ["42"]})
    assert r.json()["rewards"] == [1.0]
    assert [c.id for c in admin.list_reward_capabilities(namespace, "arith").items] == [cap.id]
    admin.revoke_reward_capability(namespace, "arith", cap.id)
    admin.revoke_reward_capability(namespace, "arith", cap.id)  # idempotent
    assert httpx.post(live_server.url + cap.path, json={"query": ["x"]}).status_code == 404


@pytest.mark.anyio
async def test_async_client_methods(live_server: Any, namespace: str) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        assert (await client.get_rubric(None, "arith")).name == "arithmetic"
        inline = {"task": "t", "steps": [{"state": {"observation": "o"}, "action": "42"}]}
        assert (await client.score_rubric(None, "arith", inline, label=42)).reward == 1.0
        batch = await client.score_rubric_batch(None, "arith", [{"trajectory": inline, "label": 41}])
        assert batch.items[0].reward == 0.25
        cap = await client.create_reward_capability(None, "arith")
        assert (await client.list_reward_capabilities(None, "arith")).items[0].id == cap.id
        await client.revoke_reward_capability(None, "arith", cap.id)


def test_rubric_routes_and_schemas_match_the_servers_openapi(live_server: Any) -> None:
    openapi = httpx.get(f"{live_server.url}/openapi.json").json()
    paths, schemas = openapi["paths"], openapi["components"]["schemas"]
    ops = [
        operations.create_rubric(
            "nsx", {"id": "idx", "name": "n", "criteria": [{"id": "a", "text": "t", "weight": 1}]}
        ),
        operations.get_rubric("nsx", "idx"),
        operations.score_rubric("nsx", "idx", {"trajectory_id": "t"}),
        operations.score_rubric_batch("nsx", "idx", [{"trajectory_id": "t"}], snapshot=None, skip_judged=False),
        operations.create_reward_capability("nsx", "idx", None),
        operations.list_reward_capabilities("nsx", "idx", 10, "c"),
        operations.revoke_reward_capability("nsx", "idx", "cidx"),
    ]
    placeholders = {"nsx": "{ns}", "idx": "{id}", "cidx": "{capability_id}"}
    for op in ops:
        template = "/".join(placeholders.get(part, part) for part in op.path.split("/"))
        assert op.method.lower() in paths.get(template, {}), (op.method, template)
        known = {p["name"] for p in paths[template][op.method.lower()].get("parameters", [])}
        assert set(op.params or {}) <= known
    assert "post" in paths["/v1/reward/{capability}"]
    mirrored = {
        "RubricCreate": models.RubricCreate,
        "CriterionCreate": models.RubricCriterion,
        "ScoreItem": models.RubricScoreItem,
        "ScoreRequest": models.RubricScoreRequest,
        "ScoreBatchRequest": models.RubricScoreBatchRequest,
        "CapabilityCreate": models.RewardCapabilityCreate,
        "RubricRead": models.Rubric,
        "CriterionRead": models.RubricCriterionRead,
        "ScoreRead": models.RubricScore,
        "CriterionScoreRead": models.CriterionScore,
        "StageScoreRead": models.StageScore,
        "ScoreBatchRead": models.RubricBatchScore,
        "CapabilityRead": models.RewardCapability,
        "CapabilityCreated": models.RewardCapabilityCreated,
    }
    for server_name, model in mirrored.items():
        assert set(model.model_fields) == set(schemas[server_name]["properties"]), server_name


# -- verl ------------------------------------------------------------------------------


def test_verl_compute_score_has_verls_signature() -> None:
    parameters = inspect.signature(adapters.compute_score).parameters
    assert list(parameters) == ["data_source", "solution_str", "ground_truth", "extra_info", "kwargs"]
    assert parameters["extra_info"].default is None
    assert parameters["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    assert list(inspect.signature(adapters.compute_score_batch).parameters)[:4] == [
        "data_sources",
        "solution_strs",
        "ground_truths",
        "extra_infos",
    ]
    assert not inspect.iscoroutinefunction(adapters.compute_score)  # verl runs it in an executor


def test_verl_compute_score_against_the_server(env: str) -> None:
    extra_info = {
        "split": "train",
        "index": 3,
        "question": "What is 6 * 7?",
        "num_turns": 2,
        "rollout_reward_scores": {},
    }
    # NaiveRewardManager
    result = adapters.compute_score(
        data_source="openai/gsm8k", solution_str="6 * 7 = 42", ground_truth="42", extra_info=extra_info
    )
    assert result == {"score": 1.0, "rubric/correct": 1.0, "rubric/no_sorry": 1.0}
    # The reward loop passes more keyword arguments.
    result = adapters.compute_score(
        data_source="openai/gsm8k",
        solution_str="Sorry, I think 41.",
        ground_truth="42",
        extra_info=extra_info,
        reward_router_address=None,
        reward_model_tokenizer=None,
    )
    assert result == {"score": 0.0, "rubric/correct": 0.0, "rubric/no_sorry": 0.0}
    # BatchRewardManager (numpy-like ground truths are sent as plain JSON).
    results = adapters.compute_score_batch(
        data_sources=["a", "b"], solution_strs=["42", "it is 41"], ground_truths=[42, 42], extra_infos=[{}, {}]
    )
    assert [r["score"] for r in results] == [1.0, 0.25]
    # A configured one, shipped to another process as verl does (pickled without its connection).
    configured = pickle.loads(pickle.dumps(adapters.verl_compute_score(rubric="tools")))
    call = '{"tool_calls": [{"function": {"name": "calc", "arguments": "6*7"}}]}'
    assert configured("src", call, "nothing")["rubric/calc"] == 1.0


def test_verl_needs_a_rubric(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFLEXA_RUBRIC", raising=False)
    with pytest.raises(ValueError, match="REFLEXA_RUBRIC"):
        adapters.verl_compute_score()


# -- TRL -------------------------------------------------------------------------------


def trl_kwargs(**columns: Any) -> dict[str, Any]:
    """What GRPOTrainer._calculate_rewards passes besides prompts and completions."""
    logged: dict[str, list[float]] = {}
    return {
        "completion_ids": [[1, 2, 3]] * len(next(iter(columns.values()))),
        "trainer_state": object(),
        "log_extra": lambda column, values: None,
        "log_metric": lambda name, value: logged.setdefault(name, []).append(value),
        "_logged": logged,
        **columns,
    }


def test_trl_reward_func_plain_and_conversational(env: str) -> None:
    func = adapters.trl_reward_func()
    assert func.__name__ == "reflexa_arith"
    kwargs = trl_kwargs(solution=["42", "42", "7"])
    logged = kwargs.pop("_logged")
    rewards = func(prompts=["6*7?", "6*7?", "3+4?"], completions=["It is 42.", "sorry, 41", "7"], **kwargs)
    assert rewards == [1.0, 0.0, 1.0]
    assert logged == {"rubric/correct": [pytest.approx(2 / 3)], "rubric/no_sorry": [pytest.approx(2 / 3)]}

    tools = adapters.trl_reward_func(rubric="tools", label_key="answer", name="calc_reward")
    prompts = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "6*7?"}]] * 2
    completions = [
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"e": "6*7"}}}],
            },
            {"role": "tool", "name": "calc", "content": "42"},
            {"role": "assistant", "content": "The answer is 42"},
        ],
        [{"role": "assistant", "content": "The answer is 42"}],
    ]
    kwargs = trl_kwargs(answer=["42", "42"], solution=["ignored", "ignored"])
    kwargs.pop("_logged")
    assert tools(prompts=prompts, completions=completions, **kwargs) == [1.0, 0.5]
    with pytest.raises(ValueError, match="label_key 'missing'"):
        adapters.trl_reward_func(label_key="missing")(prompts=["p"], completions=["c"], solution=["x"])
    assert pickle.loads(pickle.dumps(func)).__name__ == "reflexa_arith"


def test_trl_async_reward_func(env: str) -> None:
    func = adapters.trl_async_reward_func()
    assert inspect.iscoroutinefunction(func.__call__)  # what TRL's is_async_callable looks at
    kwargs = trl_kwargs(ground_truth=[42, 42])
    kwargs.pop("_logged")

    async def twice() -> list[list[float | None]]:
        first = await func(prompts=["q", "q"], completions=["42", "41"], **kwargs)
        return [first, await func(prompts=["q"], completions=["= 42"], ground_truth=[42])]

    assert asyncio.run(twice()) == [[1.0, 0.25], [1.0]]
    assert asyncio.run(func(prompts=["q"], completions=["42"], ground_truth=[42])) == [1.0]  # another event loop


def tiny_model_and_tokenizer() -> tuple[Any, Any]:
    """A 2-layer Llama with a 30-word vocabulary and a word-level tokenizer, built
    offline from a config (no download)."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = [
        "what",
        "is",
        "six",
        "times",
        "seven",
        "forty",
        "two",
        "42",
        "41",
        "the",
        "answer",
        "sorry",
        "i",
        "think",
        "it",
        "=",
        "*",
        "+",
        "and",
        "yes",
        "no",
    ]
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", *words])}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
    )
    return LlamaForCausalLM(config), tokenizer


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_grpo_trainer_trains_two_steps_with_reflexa_rewards(env: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict(
        {"prompt": ["what is six times seven", "six * seven ="] * 4, "solution": ["42", "42"] * 4}
    )
    sync_reward = adapters.trl_reward_func(name="reflexa_sync")
    async_reward = adapters.trl_async_reward_func(name="reflexa_async")
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[sync_reward, async_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    steps = [entry for entry in trainer.state.log_history if "rewards/reflexa_sync/mean" in entry]
    assert len(steps) == 2
    for entry in steps:
        # Both reward functions scored the same completions with the same rubric.
        assert entry["rewards/reflexa_sync/mean"] == pytest.approx(entry["rewards/reflexa_async/mean"])
        assert 0.0 <= entry["rewards/reflexa_sync/mean"] <= 1.0
        assert "rubric/correct" in entry and "rubric/no_sorry" in entry  # logged through TRL's log_metric
