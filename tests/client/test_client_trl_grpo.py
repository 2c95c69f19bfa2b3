"""reflexa.integrations.trl_grpo: TRL's GRPOTrainer (1.16) training on Reflexa's
advantages, against a live server, on a tiny randomly initialised Llama on the CPU.

Spies record what TRL computed (GRPOTrainer._generate_and_score_completions' own
`advantages`, before ReflexaGRPOTrainer replaces them), what the client sent and the
server answered (Client.distill_advantages), and what reached the loss
(GRPOTrainer._compute_loss's `inputs`, rows named by `reflexa_row`). TRL's internals
read: trl/trainer/grpo_trainer.py of TRL 1.16.0 (_generate_and_score_completions,
_calculate_rewards, _compute_loss, which since 1.16 unsqueezes only (B,) advantages).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reflexa import Client

from tests.factories import unique

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from reflexa.integrations import trl_grpo  # noqa: E402
from reflexa.integrations.trl_grpo import ReflexaGRPOTrainer, ReflexaHookError, TeacherSignal  # noqa: E402
from test_client_adapters import tiny_model_and_tokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

PROMPTS = ["what is six times seven", "six * seven ="]


def words(completions: list[Any], **_: Any) -> list[float | None]:
    """A reward TRL can compute: the completion's number of words; None (unscored) for
    the first completion of each call, which TRL then treats as unscorable."""
    return [None if i == 0 else float(len(str(c).split())) for i, c in enumerate(completions)]


def length(completions: list[Any], **_: Any) -> list[float]:
    return [float(len(str(c))) for c in completions]


def has_42(completions: list[Any], **_: Any) -> list[float | None]:
    return [None if i == 0 else float("42" in str(c)) for i, c in enumerate(completions)]


@pytest.fixture
def reflexa(live_server: Any) -> Iterator[Client]:
    namespace = unique("trl")
    with Client(live_server.url, live_server.admin_key, namespace=namespace) as client:
        client.create_namespace(namespace)
        yield client


class Spies:
    """What TRL computed, what the server answered, and what reached the loss."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, client: Client) -> None:
        self.trl: list[torch.Tensor] = []
        self.requests: list[dict[str, Any]] = []
        self.responses: list[Any] = []
        self.loss_inputs: list[dict[str, torch.Tensor]] = []
        self.contexts: list[Any] = []
        generate = GRPOTrainer._generate_and_score_completions
        compute_loss = GRPOTrainer._compute_loss

        def spy_generate(trainer: Any, inputs: Any) -> Any:
            output = generate(trainer, inputs)
            self.trl.append(output["advantages"].detach().clone())
            return output

        def spy_loss(trainer: Any, model: Any, inputs: Any) -> Any:
            self.loss_inputs.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
            return compute_loss(trainer, model, inputs)

        monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", spy_generate)
        monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy_loss)
        advantages, contexts = client.distill_advantages, client.distill_contexts

        def spy_advantages(method: str, groups: Any, *, params: Any = None) -> Any:
            self.requests.append({"method": method, "groups": copy.deepcopy(groups), "params": dict(params or {})})
            self.responses.append(advantages(method, groups, params=params))
            return self.responses[-1]

        def spy_contexts(*args: Any, **kwargs: Any) -> Any:
            self.contexts.append(contexts(*args, **kwargs))
            return self.contexts[-1]

        monkeypatch.setattr(client, "distill_advantages", spy_advantages)
        monkeypatch.setattr(client, "distill_contexts", spy_contexts)

    def used(self) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """(response index, global rows, advantages) of each loss call, in order."""
        return [(i, batch["reflexa_row"], batch["advantages"]) for i, batch in enumerate(self.loss_inputs)]


def config(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    options: dict[str, Any] = {
        "output_dir": str(tmp_path / "grpo"),
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 6,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        **overrides,
    }
    return GRPOConfig(**options)


def dataset() -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS * 4, "solution": ["42", "42"] * 4})


def make_trainer(
    reflexa: Client,
    tmp_path: Path,
    reward_funcs: list[Callable[..., Any]],
    *,
    model_and_tokenizer: tuple[Any, Any] | None = None,
    args: dict[str, Any] | None = None,
    **options: Any,
) -> ReflexaGRPOTrainer:
    """A trainer on the prompts of `dataset`, with the tiny model unless one is given;
    `args` overrides `config`, `options` are the trainer's own (method, params, teacher)."""
    model, tokenizer = model_and_tokenizer or tiny_model_and_tokenizer()
    return ReflexaGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=config(tmp_path, **(args or {})),
        train_dataset=dataset(),
        processing_class=tokenizer,
        reflexa=reflexa,
        **options,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("scale", ["group", "batch"])
def test_grpo_advantages_are_the_servers_and_equal_trls(
    reflexa: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scale: str
) -> None:
    torch.manual_seed(0)
    args = {"scale_rewards": scale, "reward_weights": [1.0, 0.5]}
    trainer = make_trainer(reflexa, tmp_path, [words, has_42], args=args, method="grpo")
    assert trainer.reflexa_params == {"null_rewards": "trl", "scale": scale, "eps": 1e-4}
    spies = Spies(monkeypatch, reflexa)
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(spies.responses) == len(spies.trl) == len(spies.loss_inputs) == 2  # one generation per step

    for step, rows, used in spies.used():
        response, request = spies.responses[step], spies.requests[step]
        served = torch.tensor([t.advantage for t in response.trajectories], dtype=torch.float64)
        # (b) the loss used exactly the server's numbers, row for row (after TRL's shuffle) ...
        assert used.dim() == 1 and torch.equal(used, served[rows].float())
        # ... which equal TRL's own computation with the same parameters (float32 vs float64).
        assert torch.allclose(served, spies.trl[step].cpu().double(), atol=1e-5), (served, spies.trl[step])
        # Groups as TRL makes them: num_generations consecutive completions of one prompt.
        assert [len(g["trajectories"]) for g in request["groups"]] == [2, 2]
        # The first completion of every reward call is unscorable: sent as a null reward, advantage 0.
        assert request["groups"][0]["trajectories"][0]["reward"] is None and served[0] == 0.0
        assert response.diagnostics.batch.null_rewards == 1

    # A value by hand: group 1 of the last step, rewards R = words + 0.5 · has_42.
    group = spies.requests[-1]["groups"][1]["trajectories"]
    r = [t["reward"] for t in group]
    if scale == "group":
        mean = sum(r) / 2
        std = (sum((x - mean) ** 2 for x in r) / 1) ** 0.5  # sample std of 2 (ddof 1)
        expected = (r[0] - mean) / (std + 1e-4)
    else:
        everyone = [t["reward"] for g in spies.requests[-1]["groups"] for t in g["trajectories"]]
        scored = [x for x in everyone if x is not None]
        m = sum(scored) / len(scored)
        std_b = (sum((x - m) ** 2 for x in scored) / (len(scored) - 1)) ** 0.5
        expected = (r[0] - sum(r) / 2) / (std_b + 1e-4)
    assert spies.responses[-1].trajectories[2].advantage == pytest.approx(expected, abs=1e-9)
    # TRL's completions table shows the advantages that were used.
    assert list(trainer._logs["advantages"])[-4:] == pytest.approx(
        [t.advantage for t in spies.responses[-1].trajectories]
    )
    assert any("reflexa/advantages_std" in entry for entry in trainer.state.log_history)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rloo_with_the_servers_params(reflexa: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    trainer = make_trainer(reflexa, tmp_path, [words], args={"max_steps": 1, "num_generations": 4}, method="rloo")
    spies = Spies(monkeypatch, reflexa)
    trainer.train()
    [request], [response] = spies.requests, spies.responses
    assert request["params"] == {"null_rewards": "trl"}
    [(_, rows, used)] = spies.used()
    served = torch.tensor([t.advantage for t in response.trajectories], dtype=torch.float64)
    assert torch.equal(used, served[rows].float())
    # RLOO by hand on the one group: A_i = R_i - mean of the scored others; the null reward is left out.
    r = [t["reward"] for t in request["groups"][0]["trajectories"]]
    assert r[0] is None
    scored = r[1:]
    for i, value in enumerate(scored, start=1):
        others = [x for j, x in enumerate(scored, start=1) if j != i]
        assert response.trajectories[i].advantage == pytest.approx(value - sum(others) / len(others), abs=1e-9)


def teacher_logps_by_hand(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    """log π(completion[t] | prompt, completion[:t]) with the model, one forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return [float(logps[t, token]) for t, token in enumerate(completion)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("scorer", ["policy", "reflexa"])
def test_token_signal_uses_per_token_advantages(
    reflexa: Client,
    live_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scorer: str,
    request: pytest.FixtureRequest,
) -> None:
    torch.manual_seed(2)
    model, tokenizer = tiny_model_and_tokenizer()
    initial = copy.deepcopy(model)  # the policy at the first generation (the teacher when scorer is policy)
    client, endpoint = reflexa, None
    if scorer == "reflexa":  # the initial policy, frozen, as the server's teacher endpoint
        client, endpoint = request.getfixturevalue("teacher_server")(initial, tokenizer, reflexa)
    trainer = make_trainer(
        client,
        tmp_path,
        [length],
        model_and_tokenizer=(model, tokenizer),
        args={"max_completion_length": 5},
        method="token_signal",
        params={"beta": 0.5, "clip": 2.0},
        teacher=TeacherSignal("memory", scorer=scorer),  # type: ignore[arg-type]
    )
    spies = Spies(monkeypatch, client)
    trainer.train()
    assert trainer.state.global_step == 2 and len(spies.responses) == 2
    for step, rows, used in spies.used():
        response, mask = spies.responses[step], spies.loss_inputs[step]["completion_mask"]
        # (B, T) per-token advantages, the server's row for row and token for token.
        assert used.shape == mask.shape
        served = torch.tensor([t.advantages[: mask.size(1)] for t in response.trajectories])
        assert torch.equal(used, served[rows].float())
        assert (used[mask == 0] == 0).all()
        assert response.diagnostics.batch.tokens == int(
            sum(sum(t["mask"]) for g in spies.requests[step]["groups"] for t in g["trajectories"])
        )
        # Varies within a completion: the teacher-student gap, not one number per sequence.
        assert any(
            len({round(a, 6) for a, m in zip(t.advantages, tm, strict=False) if m}) > 1
            for t, tm in zip(
                response.trajectories,
                [t["mask"] for g in spies.requests[step]["groups"] for t in g["trajectories"]],
                strict=True,
            )
        )

    # By hand, step 1, row 1: the teacher context Reflexa built for it, scored by the
    # initial policy; the student the same policy after TRL's prompt; A the group's
    # GRPO advantage; A_t = A + 0.5 · clip(teacher - student, ±2).
    first = spies.requests[0]["groups"][0]["trajectories"]
    batch = spies.loss_inputs[0]
    row = int((batch["reflexa_row"] == 1).nonzero()[0, 0])
    size = int(batch["completion_mask"][row].sum())
    completion = batch["completion_ids"][row, :size].tolist()
    prompt = batch["prompt_ids"][row][batch["prompt_mask"][row] == 1].tolist()
    context = spies.contexts[0].trajectories[1].steps[0].teachers["memory"]
    assert context.text and not context.applicable  # a new namespace: memory has nothing, the plain context
    teacher = teacher_logps_by_hand(initial, tokenizer(text=[context.text])["input_ids"][0], completion)
    student = teacher_logps_by_hand(initial, prompt, completion)
    assert first[1]["logprobs"]["teacher"][:size] == pytest.approx(teacher, abs=1e-4)
    assert first[1]["logprobs"]["student"][:size] == pytest.approx(student, abs=1e-4)
    r = [t["reward"] for t in first]
    outcome = (r[1] - (r[0] + r[1]) / 2) / (abs(r[0] - r[1]) / 2**0.5 + 1e-4)  # ddof-1 std of two: |a - b| / sqrt 2
    served = spies.responses[0].trajectories[1]
    assert served.advantage == pytest.approx(outcome, abs=1e-9)
    if endpoint is not None:  # every scored completion of both steps went to the endpoint
        scored = sum(int(n > 0) for batch in spies.loss_inputs for n in batch["completion_mask"].sum(dim=1).tolist())
        assert endpoint.sequences == scored
    for t in range(size):
        gap = max(-2.0, min(2.0, teacher[t] - student[t]))
        assert served.advantages[t] == pytest.approx(outcome + 0.5 * gap, abs=1e-4)


@pytest.fixture
def teacher_server(tmp_path: Path) -> Iterator[Any]:
    """A Reflexa server whose teacher endpoint serves the given model (vLLM's
    /v1/completions shape, examples/tiny_teacher_server.py); yields a factory of clients."""
    from contextlib import ExitStack

    from examples.tiny_teacher_server import serve_completions
    from migrations import upgrade
    from tests.conftest import start_server

    stack = ExitStack()

    def make(model: Any, tokenizer: Any, like: Client) -> tuple[Client, Any]:
        endpoint = stack.enter_context(serve_completions(model, tokenizer.backend_tokenizer))
        url = f"sqlite:///{tmp_path / 'teacher.db'}"
        upgrade(url)
        server = start_server(url, tmp_path, env={"REFLEXA_TEACHER__BASE_URL": endpoint.url}, log=tmp_path / "s.log")
        stack.callback(server.stop)
        namespace = like.config.namespace_or_default(None)
        client = stack.enter_context(Client(server.url, server.admin_key, namespace=namespace))
        client.create_namespace(namespace)
        return client, endpoint

    with stack:
        yield make


def test_refusals_before_training(reflexa: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = tiny_model_and_tokenizer()
    common = {
        "model": model,
        "reward_funcs": [words],
        "args": config(tmp_path),
        "train_dataset": dataset(),
        "processing_class": tokenizer,
        "reflexa": reflexa,
    }
    with pytest.raises(ValueError, match="needs teacher"):
        ReflexaGRPOTrainer(**common, method="token_signal")
    with pytest.raises(ValueError, match="params.kl"):
        ReflexaGRPOTrainer(**common, params={"kl": {"coef": 0.1}})
    with pytest.raises(ValueError, match="method must be"):
        ReflexaGRPOTrainer(**common, method="step_shaping")
    with pytest.raises(ValueError, match="sum_then_normalize"):
        ReflexaGRPOTrainer(**{**common, "args": config(tmp_path, multi_objective_aggregation="normalize_then_sum")})
    # TRL without the hooks: refused by name, never a silent fallback to TRL's advantages.
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    with pytest.raises(ReflexaHookError, match="_calculate_rewards"):
        ReflexaGRPOTrainer(**common)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_renamed_generation_hook_stops_training(
    reflexa: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If TRL scored completions through another method, batches would reach the loss
    with TRL's advantages: the loss refuses them."""
    trainer = make_trainer(reflexa, tmp_path, [words], args={"max_steps": 1})
    monkeypatch.setattr(
        trainer, "_generate_and_score_completions", GRPOTrainer._generate_and_score_completions.__get__(trainer)
    )
    with pytest.raises(ReflexaHookError, match="without Reflexa's advantages"):
        trainer.train()
    assert trl_grpo.CHECKED_TRL_VERSIONS == ("1.16.0",)
