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
TRL: trl/trainer/grpo_trainer.py (1.16), GRPOTrainer._calculate_rewards; the check
TRL before 1.16 makes (huggingface/trl tags v1.0.0–v1.9.0, grpo_trainer.py
`_calculate_rewards`: `elif inspect.iscoroutinefunction(reward_func):`, and
`asyncio.iscoroutinefunction` in v0.27.0–v0.29.0; 1.16 asks
trl.trainer.utils.is_async_callable, which also looks at `__call__`).
verl's reward_kwargs: verl/trainer/ppo/reward.py (verl 0.9.1), get_custom_reward_fn
wraps the function so that `custom_reward_function.reward_kwargs` are merged into
every call's keyword arguments, taking precedence (`_call_with_kwargs`).
OpenRLHF: openrlhf/utils/agent.py (OpenRLHF/OpenRLHF@3c3be6234e0c),
SingleTurnAgentExecutor loads a `--remote_rm_url` ending in .py with
`importlib.util.spec_from_file_location("reward_func", path)` and calls its
`reward_func(queries, prompts, labels)` through `asyncio.to_thread`, one sample a call.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from reflexa import AsyncClient, Client, adapters, errors, models

from tests.factories import RIGHT_NUMBER, unique

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


GSM_RUBRIC = {
    "name": "grade-school math",
    "criteria": [
        RIGHT_NUMBER,
        {
            "id": "no_sorry",
            "text": "Does not apologise.",
            "weight": 1,
            "check": {"type": "not_contains", "text": "sorry", "case_sensitive": False},
        },
    ],
}
GSM8K_ANSWER = (  # the raw gsm8k dataset's `answer` column: a worked solution ending in "#### 72"
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
GSM8K_QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


@pytest.fixture
def namespace(admin: Client) -> str:
    name = unique("rub")
    admin.create_namespace(name)
    admin.create_rubric(name, "arith", RUBRIC["name"], RUBRIC["criteria"])
    admin.create_rubric(name, "tools", TOOL_RUBRIC["name"], TOOL_RUBRIC["criteria"])
    admin.create_rubric(name, "gsm", GSM_RUBRIC["name"], GSM_RUBRIC["criteria"])
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


def verl_call(raw_fn: Callable[..., Any], reward_kwargs: dict[str, Any], **call_kwargs: Any) -> Any:
    """How verl calls a custom reward function (verl/trainer/ppo/reward.py, get_custom_reward_fn):
    the call's keyword arguments with custom_reward_function.reward_kwargs merged over them."""
    return raw_fn(**{**call_kwargs, **reward_kwargs})


def test_verl_reward_kwargs_configure_the_call(env: str, live_server: Any) -> None:
    call = '{"tool_calls": [{"function": {"name": "calc", "arguments": "6*7"}}]}'
    sample = {"data_source": "src", "solution_str": call, "ground_truth": "42", "extra_info": {"question": "6*7?"}}
    # The environment says REFLEXA_RUBRIC=arith; reward_kwargs choose the rubric (and namespace) instead.
    assert set(verl_call(adapters.compute_score, {}, **sample)) == {"score", "rubric/correct", "rubric/no_sorry"}
    result = verl_call(adapters.compute_score, {"rubric": "tools", "namespace": env}, **sample)
    assert set(result) == {"score", "rubric/calc", "rubric/correct"} and result["rubric/calc"] == 1.0
    # The reward loop's own keyword arguments are still accepted (and ignored).
    more = {**sample, "reward_router_address": None, "reward_model_tokenizer": None}
    assert "rubric/calc" in verl_call(adapters.compute_score, {"rubric": "tools"}, **more)
    batch = verl_call(
        adapters.compute_score_batch,
        {"rubric": "gsm"},
        data_sources=["a", "b"],
        solution_strs=[r"\boxed{72}", "71"],
        ground_truths=[GSM8K_ANSWER, GSM8K_ANSWER],
        extra_infos=[{}, {}],
    )
    assert [r["score"] for r in batch] == [1.0, 0.25]
    # A configured adapter takes them too; without REFLEXA_RUBRIC in the environment as well.
    configured = adapters.verl_compute_score(rubric="arith", base_url=live_server.url)
    assert "rubric/calc" in verl_call(configured, {"rubric": "tools"}, **sample)
    # Unknown keyword arguments are refused by name, never swallowed.
    for fn in (adapters.compute_score, configured):
        with pytest.raises(TypeError, match=r"'rubirc'.*accepts rubric, namespace"):
            verl_call(fn, {"rubirc": "tools"}, **sample)
    with pytest.raises(TypeError, match=r"'namespce', 'rubirc'"):
        verl_call(
            adapters.compute_score_batch,
            {"rubirc": "x", "namespce": "y"},
            data_sources=[],
            solution_strs=[],
            ground_truths=[],
        )


def test_verl_refusals_raise_with_the_servers_message(env: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reflexa.adapters"), pytest.raises(errors.InvalidInput) as refused:
        adapters.compute_score("src", "42", "forty-two", None, rubric="gsm")
    assert (refused.value.field, refused.value.rule) == ("items[0].label", "label_not_numeric")
    assert "forty-two" in str(refused.value) and "rule=label_not_numeric" in str(refused.value)
    assert not isinstance(refused.value, TimeoutError)  # verl's NaiveRewardManager turns a TimeoutError into 0.0
    [record] = [r for r in caplog.records if r.name == "reflexa.adapters"]
    assert record.levelno == logging.WARNING and "label_not_numeric" in record.getMessage()


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
    # What TRL before 1.16 checks (inspect.iscoroutinefunction; asyncio's in 0.27-0.29) — a
    # callable instance with an async __call__ fails it and is then called as a sync function.
    assert inspect.iscoroutinefunction(func) and asyncio.iscoroutinefunction(func)
    assert func.__name__ == "reflexa_arith"
    kwargs = trl_kwargs(ground_truth=[42, 42])
    kwargs.pop("_logged")

    async def twice() -> list[list[float | None]]:
        first = await func(prompts=["q", "q"], completions=["42", "41"], **kwargs)
        return [first, await func(prompts=["q"], completions=["= 42"], ground_truth=[42])]

    assert asyncio.run(twice()) == [[1.0, 0.25], [1.0]]
    assert asyncio.run(func(prompts=["q"], completions=["42"], ground_truth=[42])) == [1.0]  # another event loop


def test_trl_reads_gsm8ks_answer_column(env: str) -> None:
    """The raw gsm8k dataset: the `answer` column is a worked solution ending in "#### 72"."""
    completions = [r"48 + 24 = 72, so \boxed{72}", "The answer is 72.", "Sorry, 71", r"\boxed{70}"]
    kwargs = trl_kwargs(answer=[GSM8K_ANSWER] * 4)
    kwargs.pop("_logged")
    expected = [1.0, 1.0, 0.0, 0.25]
    assert adapters.trl_reward_func(rubric="gsm")(prompts=[GSM8K_QUESTION] * 4, completions=completions, **kwargs) == (
        expected
    )
    func = adapters.trl_async_reward_func(rubric="gsm")
    assert asyncio.run(func(prompts=[GSM8K_QUESTION] * 4, completions=completions, **kwargs)) == expected


def test_trl_refusals_raise_with_the_servers_message(env: str, caplog: pytest.LogCaptureFixture) -> None:
    kwargs = trl_kwargs(answer=[72] * 300)
    kwargs.pop("_logged")
    kwargs["answer"][260] = "Natalia sold 3 clips"  # no final answer: not a number (in the second request)
    sync = adapters.trl_reward_func(rubric="gsm")
    with caplog.at_level(logging.WARNING, logger="reflexa.adapters"), pytest.raises(errors.InvalidInput) as refused:
        sync(prompts=["q"] * 300, completions=["72"] * 300, **kwargs)
    assert (refused.value.field, refused.value.rule) == ("items[260].label", "label_not_numeric")
    assert "field=items[260].label | rule=label_not_numeric" in caplog.text
    with pytest.raises(errors.InvalidInput, match="label_not_numeric"):
        asyncio.run(adapters.trl_async_reward_func(rubric="gsm")(prompts=["q"], completions=["72"], answer=["seven"]))


def tiny_model_and_tokenizer() -> tuple[Any, Any]:
    """A 2-layer Llama with a 30-word vocabulary and a word-level tokenizer, built
    offline from a config (no download)."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from examples.common.tiny_lm import tiny_llama

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
    model = tiny_llama(len(vocab), None, width=16, layers=2, positions=64, eos_token_id=1)
    return model, tokenizer


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


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_grpo_calculate_rewards_before_and_since_trl_1_16(
    env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL 1.16's own reward-calling code (GRPOTrainer._calculate_rewards), on a tiny random
    model, with the gsm8k columns; then with the check TRL before 1.16 makes
    (`inspect.iscoroutinefunction(reward_func)`) in place of 1.16's is_async_callable."""
    torch = pytest.importorskip("torch")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer import grpo_trainer

    torch.manual_seed(0)
    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict({"prompt": [GSM8K_QUESTION] * 2, "answer": [GSM8K_ANSWER] * 2})
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        bf16=False,
    )

    def rewards() -> list[list[float]]:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[adapters.trl_reward_func(rubric="gsm"), adapters.trl_async_reward_func(rubric="gsm")],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        completions = [r"so \boxed{72}", "Sorry, 71"]
        inputs = [{"prompt": GSM8K_QUESTION, "answer": GSM8K_ANSWER}] * 2
        return trainer._calculate_rewards(inputs, [GSM8K_QUESTION] * 2, completions, [[1], [2]]).tolist()

    assert rewards() == [[1.0, 1.0], [0.0, 0.0]]
    monkeypatch.setattr(grpo_trainer, "is_async_callable", inspect.iscoroutinefunction)  # TRL < 1.16
    assert rewards() == [[1.0, 1.0], [0.0, 0.0]]
    # The instance form is what TRL < 1.16 cannot await: it is called as a sync function.
    assert not inspect.iscoroutinefunction(adapters.AsyncTRLRewardFunc(rubric="gsm"))


# -- OpenRLHF (--remote_rm_url /path/to/reflexa/integrations/openrlhf_reward.py) ----------------


def load_openrlhf_reward_func() -> Callable[..., dict[str, Any]]:
    """Loaded as OpenRLHF loads a .py reward file: by path, as a module named reward_func."""
    from reflexa.integrations import openrlhf_reward

    spec = importlib.util.spec_from_file_location("reward_func", openrlhf_reward.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func  # type: ignore[no-any-return]


def in_a_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """OpenRLHF runs reward_func through asyncio.to_thread."""
    return asyncio.run(asyncio.to_thread(fn, *args))


def test_openrlhf_reward_func_file(
    admin: Client, namespace: str, live_server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cap = admin.create_reward_capability(namespace, "gsm", note="openrlhf file")
    monkeypatch.setenv("REFLEXA_URL", live_server.url)
    monkeypatch.setenv("REFLEXA_REWARD_CAPABILITY", cap.secret)
    monkeypatch.delenv("REFLEXA_API_KEY", raising=False)
    reward_func = load_openrlhf_reward_func()
    prompt = "<|im_start|>user\n" + GSM8K_QUESTION + "<|im_end|>\n<|im_start|>assistant\n"

    result = in_a_thread(reward_func, [prompt + r"48 + 24 = \boxed{72}<|im_end|>"], [prompt], [GSM8K_ANSWER])
    assert result == {
        "rewards": [1.0],
        "scores": [1.0],
        "extra_logs": {"rubric/correct": [1.0], "rubric/no_sorry": [1.0]},
    }
    # The prompt cut from the left by OpenRLHF: located by its suffix, the prompt's numbers not read.
    result = in_a_thread(reward_func, [prompt[60:] + "I don't know<|im_end|>"], [prompt], [GSM8K_ANSWER])
    assert result["rewards"] == [0.25]
    # The capability as a path or a URL works too; a batch of several.
    monkeypatch.setenv("REFLEXA_REWARD_CAPABILITY", live_server.url + cap.path)
    monkeypatch.setenv("REFLEXA_URL", "http://127.0.0.1:9")  # not used: the URL names the server
    result = reward_func([prompt + "72", prompt + "Sorry, 70"], [prompt, prompt], ["72", "#### 72"])
    assert result["rewards"] == [1.0, 0.0]

    # Refusals: the server's message, field and rule, raised and logged at WARNING; never the secret.
    monkeypatch.setenv("REFLEXA_REWARD_CAPABILITY", cap.path)
    monkeypatch.setenv("REFLEXA_URL", live_server.url)
    with caplog.at_level(logging.WARNING, logger="reflexa.openrlhf"):
        with pytest.raises(errors.InvalidInput) as lost:
            in_a_thread(reward_func, ["What is 6*7? 42"], [prompt], ["42"])
        assert (lost.value.field, lost.value.rule, lost.value.status) == ("query[0]", "prompt_not_found", 422)
        with pytest.raises(errors.InvalidInput) as unreadable:
            in_a_thread(reward_func, [prompt + "72"], [prompt], [GSM8K_ANSWER.replace("#### 72", "")])
        assert (unreadable.value.field, unreadable.value.rule) == ("labels[0]", "label_not_numeric")
        admin.revoke_reward_capability(namespace, "gsm", cap.id)
        with pytest.raises(errors.NotFound):
            reward_func([prompt + "72"], [prompt], ["72"])
        monkeypatch.setenv("REFLEXA_URL", "http://127.0.0.1:9")  # nothing listens: connection refused
        monkeypatch.setattr("reflexa._transport._sleep", lambda seconds: None)
        with pytest.raises(errors.ConnectionFailed) as down:
            reward_func([prompt + "72"], [prompt], ["72"])
    assert cap.secret not in str(down.value) and "<redacted>" in str(down.value)
    records = [r for r in caplog.records if r.name == "reflexa.openrlhf"]
    assert [r.levelno for r in records] == [logging.WARNING] * 4
    assert "field=query[0] | rule=prompt_not_found" in records[0].getMessage()
    assert all(cap.secret not in r.getMessage() for r in records)
    monkeypatch.delenv("REFLEXA_REWARD_CAPABILITY")
    with pytest.raises(ValueError, match="REFLEXA_REWARD_CAPABILITY"):
        reward_func(["q"], ["p"], ["l"])
