"""TRL's ``GRPOTrainer`` trained on Reflexa's advantages (POST /v1/distill/advantages).

    from reflexa import Client
    from reflexa.integrations.trl_grpo import ReflexaGRPOTrainer, TeacherSignal

    trainer = ReflexaGRPOTrainer(model=model, args=GRPOConfig(...), train_dataset=dataset,
                                 reward_funcs=[...], reflexa=Client(namespace="lab"),
                                 method="token_signal", params={"beta": 0.5, "clip": 1},
                                 teacher=TeacherSignal("memory", scorer="reflexa"))

TRL computes the rewards (its ``reward_funcs``, weighted and summed as TRL sums them)
and then its own group-normalised advantages; this trainer keeps TRL's generation,
rewards and loss and replaces only the advantages with the server's answer for the
batch: ``grpo`` / ``rloo`` (one number per completion, TRL's shape (B,)) or
``token_signal`` (one per completion token, shape (B, T), on-policy distillation
with a teacher's log-probs from Reflexa's teacher scoring, or the policy itself
scored under Reflexa's teacher context). docs/trainers.md ("TRL: Reflexa's
advantages in GRPOTrainer") says what each option does and how multi-process
training is handled.

The hooks (checked against TRL 1.16): ``GRPOTrainer._calculate_rewards`` (the rewards
of every process, captured), ``GRPOTrainer._generate_and_score_completions`` (its
output's ``advantages`` replaced), ``GRPOTrainer._get_per_token_logps_and_entropies``
(log-probs for token_signal) and ``GRPOTrainer._compute_loss``, which since 1.16 takes
(B, T) advantages as they are. Every batch the loss sees must carry this trainer's
mark (``reflexa_row``, the row's index in the gathered batch); if TRL renames a hook
the trainer raises instead of training on TRL's own advantages.

Only this module imports torch and TRL; ``import reflexa`` never does.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

try:
    import torch
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("reflexa.integrations.trl_grpo needs PyTorch and TRL: pip install trl") from exc

from reflexa.client import Client

__all__ = ["ReflexaGRPOTrainer", "ReflexaHookError", "TeacherSignal", "CHECKED_TRL_VERSIONS"]

#: TRL versions whose GRPOTrainer internals this module was read against and tested with.
CHECKED_TRL_VERSIONS = ("1.16.0",)
OUTCOME_METHODS = ("grpo", "rloo")
TOKEN_METHODS = ("token_signal",)
ROW_KEY = "reflexa_row"  # the mark: each row's index in the batch gathered over processes
#: What the hooks need of GRPOTrainer (and which methods need it).
HOOKS = {
    "_calculate_rewards": OUTCOME_METHODS + TOKEN_METHODS,
    "_generate_and_score_completions": OUTCOME_METHODS + TOKEN_METHODS,
    "_compute_loss": TOKEN_METHODS,
    "_get_per_token_logps_and_entropies": TOKEN_METHODS,
}
TEACHER_ITEMS_PER_CALL = 256


class ReflexaHookError(RuntimeError):
    """TRL's GRPOTrainer no longer has what this trainer hooks into; training on TRL's
    own advantages instead would be silent, so it stops."""


@dataclass(frozen=True)
class TeacherSignal:
    """Where token_signal's teacher log-probs come from.

    ``teacher``: the teacher context Reflexa builds (POST …/distill/contexts) for each
    completion, as an inline one-step trajectory (task and observation: the prompt's
    text, action: the completion): a kind (``"memory"``, ``"hindsight"``, …) or a
    :class:`~reflexa.models.TeacherSpec` / its fields. ``context_column``: instead, a
    dataset column holding each prompt's teacher context (a text, or chat messages).
    ``scorer``: ``"reflexa"`` asks the server's teacher endpoint (POST
    …/distill/teacher_logprobs, the completion's token ids as the continuation);
    ``"policy"`` scores with the policy itself under the teacher context (no gradient;
    SEED's self-teacher). ``namespace``, ``snapshot``, ``leakage`` go to
    …/distill/contexts. ``rendering``: ``"messages"`` or ``"text"`` of the context
    (default: messages for conversational prompts, else text).
    """

    teacher: str | Mapping[str, Any] | Any | None = "memory"
    scorer: Literal["reflexa", "policy"] = "reflexa"
    context_column: str | None = None
    namespace: str | None = None
    snapshot: str | None = None
    leakage: Mapping[str, Any] | None = None
    rendering: Literal["text", "messages"] | None = None

    def __post_init__(self) -> None:
        if self.scorer not in ("reflexa", "policy"):
            raise ValueError(f"TeacherSignal.scorer must be 'reflexa' or 'policy', not {self.scorer!r}")
        if (self.teacher is None) == (self.context_column is None):
            raise ValueError("TeacherSignal needs one of teacher (a Reflexa teacher kind) or context_column")


def _trl_version() -> str:
    import trl

    return str(getattr(trl, "__version__", "unknown"))


class ReflexaGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """A ``trl.GRPOTrainer`` whose advantages are Reflexa's (see the module's text).

    Keyword arguments beyond GRPOTrainer's: ``reflexa`` (a :class:`reflexa.Client`;
    default one from ``REFLEXA_URL`` / ``REFLEXA_API_KEY`` / ``REFLEXA_NAMESPACE``),
    ``method`` (``grpo``, ``rloo`` or ``token_signal``), ``params`` (the method's
    params, docs/distillation.md; defaults below), ``teacher`` (token_signal: a
    :class:`TeacherSignal`).

    Defaults that make grpo reproduce TRL's own advantages: ``scale`` from
    ``args.scale_rewards`` (group, batch, none), ``eps`` 1e-4 (TRL adds 1e-4 to the
    std), ``null_rewards: "trl"`` (a completion no reward function scored: left out of
    its group's statistics, advantage 0). token_signal's outcome part uses the same;
    rloo keeps the service's default scale (none) unless ``params`` says otherwise.
    Given ``params`` override these.
    """

    def __init__(
        self,
        *args: Any,
        reflexa: Client | None = None,
        method: str = "grpo",
        params: Mapping[str, Any] | None = None,
        teacher: TeacherSignal | None = None,
        **kwargs: Any,
    ) -> None:
        if method not in OUTCOME_METHODS + TOKEN_METHODS:
            raise ValueError(f"method must be one of {OUTCOME_METHODS + TOKEN_METHODS}, not {method!r}")
        if method in TOKEN_METHODS and teacher is None:
            raise ValueError("token_signal needs teacher=TeacherSignal(...): where the teacher log-probs come from")
        if method in OUTCOME_METHODS and teacher is not None:
            raise ValueError(f"{method} takes no teacher (token_signal does)")
        for name, methods in HOOKS.items():
            if method in methods and not callable(getattr(GRPOTrainer, name, None)):
                raise ReflexaHookError(
                    f"trl.GRPOTrainer.{name} is missing in TRL {_trl_version()}: ReflexaGRPOTrainer hooks into it "
                    f"(checked against TRL {', '.join(CHECKED_TRL_VERSIONS)}); "
                    "refusing to train on TRL's own advantages"
                )
        if method in TOKEN_METHODS and "advantages.dim() == 1" not in inspect.getsource(GRPOTrainer._compute_loss):
            raise ReflexaHookError(
                f"trl.GRPOTrainer._compute_loss of TRL {_trl_version()} does not take per-token (B, T) advantages "
                "as they are (TRL 1.16 unsqueezes only (B,) ones); per-token advantages would be broadcast wrongly"
            )
        super().__init__(*args, **kwargs)
        self.reflexa_method = method
        self.reflexa_teacher = teacher
        self.reflexa = reflexa if reflexa is not None else Client()
        given = dict(params or {})
        for refused in ("kl", "is"):
            if refused in given:
                raise ValueError(
                    f"params.{refused} is not taken here: use TRL's own "
                    + ("beta (reference KL)" if refused == "kl" else "vLLM importance sampling correction")
                )
        defaults: dict[str, Any] = {"null_rewards": "trl"}
        if method != "rloo" and "std" not in given and "scale" not in given:
            defaults["scale"] = self.scale_rewards
        if method != "rloo" and "eps" not in given:
            defaults["eps"] = 1e-4
        self.reflexa_params = {**defaults, **given}
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "ReflexaGRPOTrainer sends TRL's summed reward (multi_objective_aggregation='sum_then_normalize'); "
                f"{self.multi_objective_aggregation!r} normalises each reward function first, which the service "
                "does not reproduce"
            )
        if method in TOKEN_METHODS and getattr(self, "use_liger_kernel", False):
            raise ValueError("per-token advantages do not go through TRL's Liger loss (use_liger_kernel=False)")
        self.reflexa_last_response: Any = None  # the server's last answer (for logging and tests)
        self._reflexa_rewards: torch.Tensor | None = None

    # -- the hooks -------------------------------------------------------------------

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._reflexa_rewards = rewards_per_func  # (rows of every process, reward functions)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._reflexa_rewards = None
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, self._reflexa_rewards = self._reflexa_rewards, None
        if rewards_per_func is None:
            raise ReflexaHookError(
                f"TRL {_trl_version()} did not call GRPOTrainer._calculate_rewards while scoring completions; "
                "ReflexaGRPOTrainer cannot see the rewards and refuses to train on TRL's own advantages"
            )
        if "advantages" not in output or "completion_mask" not in output:
            raise ReflexaHookError(f"TRL {_trl_version()}'s batch has no 'advantages' / 'completion_mask'")
        self._reflexa_replace(inputs, output, rewards_per_func)
        return output

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        rows = inputs.get(ROW_KEY)
        if rows is None:
            raise ReflexaHookError(
                f"a batch reached the loss without Reflexa's advantages (TRL {_trl_version()} did not go through "
                "GRPOTrainer._generate_and_score_completions); refusing to train on TRL's own advantages"
            )
        advantages, mask = inputs["advantages"], inputs["completion_mask"]
        per_token = self.reflexa_method in TOKEN_METHODS
        if (advantages.dim() == 2) != per_token or (per_token and advantages.shape != mask.shape):
            raise ReflexaHookError(
                f"advantages of shape {tuple(advantages.shape)} for completions of shape {tuple(mask.shape)}"
            )
        return super().compute_loss(model, inputs, *args, **kwargs)

    # -- the batch -------------------------------------------------------------------

    def _reflexa_replace(self, inputs: list[dict[str, Any]], output: dict[str, Any], per_func: torch.Tensor) -> None:
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        device = output["advantages"].device
        # TRL's reward per completion: the weighted sum, NaN where no function scored it.
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        local = output["completion_ids"].size(0)
        processes, index = self.accelerator.num_processes, self.accelerator.process_index
        total = rewards.numel()
        if total != local * processes or total % group_size:
            raise ReflexaHookError(
                f"{total} rewards for {processes} process(es) of {local} completions in groups of {group_size}: "
                "not the layout TRL 1.16 slices by process"
            )
        start = index * local  # TRL's process_slice
        uid = f"{self.state.global_step}-{mode}"
        per_token = self.reflexa_method in TOKEN_METHODS
        if per_token:
            if any(key in output for key in ("pixel_values", "image_grid_thw", "num_images")):
                raise ValueError("token_signal with images is not supported: the policy's log-probs need them")
            tokens = self._reflexa_token_arrays(inputs, output)  # every process's, gathered
        groups = []
        for g in range(total // group_size):
            trajectories = []
            for row in range(g * group_size, (g + 1) * group_size):
                reward = float(rewards[row])
                trajectory: dict[str, Any] = {"id": f"{uid}-{row}", "reward": None if reward != reward else reward}
                if per_token:
                    trajectory["mask"] = tokens["mask"][row]
                    trajectory["logprobs"] = {"student": tokens["student"][row], "teacher": tokens["teacher"][row]}
                trajectories.append(trajectory)
            if sum(t["reward"] is not None for t in trajectories) == 1:
                # TRL: the lone scored reward is its group's nanmean, so every advantage is 0
                # (the service would refuse a group of one); sent as the trainer's own A.
                for trajectory in trajectories:
                    trajectory["advantages"] = 0.0
            groups.append({"group_id": f"{uid}-g{g}", "trajectories": trajectories})
        answer = self.reflexa.distill_advantages(self.reflexa_method, groups, params=self.reflexa_params)
        self.reflexa_last_response = answer
        if len(answer.trajectories) != total:
            raise ReflexaHookError(f"the server answered {len(answer.trajectories)} trajectories for {total}")
        if per_token:
            width = output["completion_mask"].size(1)
            mine = [t.advantages[:width] for t in answer.trajectories[start : start + local]]
            advantages = torch.tensor(mine, dtype=torch.float32, device=device)
            logged = [sum(t.advantages) / max(1, sum(tokens["mask"][i])) for i, t in enumerate(answer.trajectories)]
        else:
            logged = [float(t.advantage if t.advantage is not None else 0.0) for t in answer.trajectories]
            advantages = torch.tensor(logged[start : start + local], dtype=torch.float32, device=device)
        output["advantages"] = advantages
        output[ROW_KEY] = torch.arange(start, start + local, device=device)
        self._reflexa_log(mode, logged, answer)

    def _reflexa_log(self, mode: str, logged: list[float], answer: Any) -> None:
        # TRL logged its own advantages for the completions table; put ours in their place.
        table = self._logs.get("advantages") if isinstance(getattr(self, "_logs", None), dict) else None
        if table is not None and len(table) >= len(logged):
            for _ in logged:
                table.pop()
            table.extend(logged)
        batch = answer.diagnostics.batch
        metrics = self._metrics[mode]
        values = torch.tensor(logged, dtype=torch.float64)  # per completion (token methods: its mean)
        metrics["reflexa/advantages_mean"].append(float(values.mean()))
        metrics["reflexa/advantages_std"].append(float(values.std(unbiased=False)))
        for name in ("order_consistency", "length_correlation", "clipped_tokens_share"):
            value = getattr(batch, name)
            if value is not None:
                metrics[f"reflexa/{name}"].append(value)
        if batch.token_reward is not None:
            metrics["reflexa/token_reward_mean"].append(batch.token_reward.mean)
        metrics["reflexa/sign_flips"].append(float(batch.sign_flips))

    # -- token_signal ------------------------------------------------------------------

    def _reflexa_token_arrays(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> dict[str, list[Any]]:
        """Mask, student and teacher log-probs of this process's completions, gathered over
        every process (padded to the longest completion; padding has mask 0)."""
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        loss_mask = completion_mask if "tool_mask" not in output else completion_mask * output["tool_mask"]
        lengths = completion_mask.sum(dim=1).tolist()  # the sequence (tool output included), before padding
        with torch.no_grad():
            student = output.get("old_per_token_logps")
            if student is None:
                student = self._reflexa_logps(
                    output["prompt_ids"], output["prompt_mask"], completion_ids, completion_mask
                )
            teacher = self._reflexa_teacher_logps(inputs, completion_ids, completion_mask, lengths)
        stacked = torch.stack([loss_mask.float(), student.float(), teacher.float()])  # (3, B, T)
        stacked = self.accelerator.pad_across_processes(stacked, dim=2, pad_index=0)
        gathered = self.accelerator.gather(stacked.transpose(0, 1).contiguous())  # (N, 3, T)
        mask = gathered[:, 0].round().int()
        # Log-probs only on counted tokens (the service never reads the others); clamp
        # float noise above 0.
        student_all = (gathered[:, 1] * mask).clamp(max=0.0)
        teacher_all = (gathered[:, 2] * mask).clamp(max=0.0)
        return {"mask": mask.tolist(), "student": student_all.tolist(), "teacher": teacher_all.tolist()}

    def _reflexa_logps(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """The policy's log-probs of ``ids`` after the (left-padded) prompts, (B, T)."""
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model,
            torch.cat([prompt_ids, ids], dim=1),
            torch.cat([prompt_mask, mask], dim=1),
            ids.size(1),
            batch_size=self.args.per_device_train_batch_size,
        )
        return logps

    def _reflexa_teacher_logps(
        self,
        inputs: list[dict[str, Any]],
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        lengths: list[int],
    ) -> torch.Tensor:
        signal = self.reflexa_teacher
        assert signal is not None
        contexts = self._reflexa_teacher_contexts(inputs, completion_ids, lengths)
        result = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
        rows = [i for i, n in enumerate(lengths) if n > 0]
        if signal.scorer == "reflexa":
            items = [
                {
                    "id": str(i),
                    "context": contexts[i],
                    "continuation": {"token_ids": completion_ids[i, : lengths[i]].tolist()},
                }
                for i in rows
            ]
            for at in range(0, len(items), TEACHER_ITEMS_PER_CALL):
                chunk = items[at : at + TEACHER_ITEMS_PER_CALL]
                answer = self.reflexa.teacher_logprobs(signal.namespace, chunk)
                for item, scored in zip(chunk, answer.items, strict=True):
                    i = int(item["id"])
                    if len(scored.logprobs) != lengths[i]:
                        raise ValueError(f"the teacher scored {len(scored.logprobs)} tokens of {lengths[i]}")
                    result[i, : lengths[i]] = torch.tensor(scored.logprobs, dtype=torch.float32)
            return result
        prompts = [self._reflexa_tokenize(contexts[i]) for i in range(len(lengths))]
        width = max(len(p) for p in prompts)
        pad = self.processing_class.pad_token_id if hasattr(self.processing_class, "pad_token_id") else None
        pad = pad if pad is not None else self._tokenizer.pad_token_id
        prompt_ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=completion_ids.device)
        prompt_mask = torch.zeros((len(prompts), width), dtype=torch.long, device=completion_ids.device)
        for i, ids in enumerate(prompts):  # left-padded, as TRL pads prompts
            prompt_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            prompt_mask[i, width - len(ids) :] = 1
        return self._reflexa_logps(prompt_ids, prompt_mask, completion_ids, completion_mask).float()

    def _reflexa_tokenize(self, context: Mapping[str, Any]) -> list[int]:
        """A teacher context in TRL's own prompt tokenization (GRPOTrainer._tokenize_prompts)."""
        if "messages" in context:
            tokenized = self.processing_class.apply_chat_template(
                conversation=[list(context["messages"])],
                chat_template=getattr(self, "chat_template", None),
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **(getattr(self, "chat_template_kwargs", None) or {}),
            )
            return list(tokenized["input_ids"][0])
        return list(self.processing_class(text=[context["text"]])["input_ids"][0])

    def _reflexa_teacher_contexts(
        self, inputs: list[dict[str, Any]], completion_ids: torch.Tensor, lengths: list[int]
    ) -> list[dict[str, Any]]:
        """Each completion's teacher context, as ``{"text": …}`` or ``{"messages": […]}``."""
        signal = self.reflexa_teacher
        assert signal is not None
        prompts = [x.get("prompt") for x in inputs]
        conversational = bool(prompts) and isinstance(prompts[0], list)
        rendering = signal.rendering or ("messages" if conversational else "text")
        if signal.context_column is not None:
            out = []
            for x in inputs:
                if signal.context_column not in x:
                    raise ValueError(
                        f"the dataset has no column {signal.context_column!r} (TeacherSignal.context_column)"
                    )
                value = x[signal.context_column]
                out.append({"text": value} if isinstance(value, str) else {"messages": list(value)})
            return out
        trajectories = []
        for i, prompt in enumerate(prompts):
            text = _prompt_text(prompt)
            completion = self.processing_class.decode(completion_ids[i, : lengths[i]], skip_special_tokens=True)
            step = {"state": {"observation": text}, "action": completion.strip() or "(empty)"}
            trajectories.append({"task": text, "steps": [step]})
        answer = self.reflexa.distill_contexts(
            signal.namespace,
            trajectories,
            [signal.teacher],
            snapshot=signal.snapshot,
            leakage=signal.leakage,
            include=[rendering],
            steps=[0],
        )
        name = next(iter(answer.trajectories[0].steps[0].teachers))
        out = []
        for trajectory in answer.trajectories:
            context = trajectory.steps[0].teachers[name]
            if rendering == "messages":
                out.append({"messages": [{"role": m.role, "content": m.content} for m in context.messages or []]})
            else:
                out.append({"text": context.text})
        return out


def _prompt_text(prompt: str | Sequence[Mapping[str, Any]] | None) -> str:
    """A TRL prompt as one text: itself, or its last user message's text."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(list(prompt or [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping)).strip()
            return str(content)
    raise ValueError("a conversational prompt without a user message")
