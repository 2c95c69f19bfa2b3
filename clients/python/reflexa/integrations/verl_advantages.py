"""verl's advantages from Reflexa: a verl ``DataProto`` batch in, ``advantages`` and
``returns`` written back, computed by POST /v1/distill/advantages through
:meth:`reflexa.Client.distill_advantages_batched` (split under the server's limits).

Read from the batch as verl 0.9 holds it (verl/trainer/ppo/ray_trainer.py,
``compute_advantage``; verl/trainer/ppo/core_algos.py, ``compute_grpo_outcome_advantage``):

- the rollout group of each row: ``non_tensor_batch["uid"]`` (rows may come in any
  order; a group's rows are sent together, groups in order of first appearance);
- which response positions count: ``batch["response_mask"]`` (B, L), else (older
  verl) the response's slice of ``batch["attention_mask"]``, its last
  ``batch["responses"].shape[-1]`` columns. A row's tokens are sent up to its last
  position with mask 1: the right padding is trimmed and never sent or counted; a
  0 before that (a multi-turn agent loop's tool output) is sent as ``mask`` 0;
- the outcome reward: the row's sum of ``batch["token_level_rewards"]`` (as verl's
  GRPO and RLOO estimators take it);
- log-probs, only where the method or params read them: ``old_log_probs`` as
  ``logprobs.student``, ``rollout_log_probs`` as ``logprobs.rollout`` (params.is),
  ``ref_log_prob`` as ``logprobs.ref`` (params.kl), and the teacher's, which verl
  does not make: a column the trainer adds (``teacher="teacher_log_probs"``; a
  mapping ``{NAME: column}`` for several, e.g. horizon_agreement's horizons).

Written back: ``batch["advantages"]`` and ``batch["returns"]`` (the same tensor, as
verl's outcome estimators return), (B, L) float32 on the mask's device, 0 in every
padded or masked position.

Two ways in:

- outcome methods (grpo, rloo) through verl's estimator registry: importing this
  module registers ``reflexa_grpo`` and ``reflexa_rloo`` with
  ``verl.trainer.ppo.core_algos.register_adv_est`` (when verl is importable). verl
  calls a registered estimator with ``token_level_rewards``, ``response_mask``,
  ``index`` (the uids) and ``config`` (the ``algorithm`` config: its
  ``norm_adv_by_std_in_grpo`` is params.std unless params say), nothing else, so
  ``VERL_USE_EXTERNAL_MODULES=reflexa.integrations.verl_advantages`` (verl imports
  it in every process it starts) and ``algorithm.adv_estimator=reflexa_grpo`` is all;
- methods that read log-probs (token_signal, direct_opd, step_shaping,
  horizon_agreement, or params.kl / params.is) need more than a registered
  estimator is given: :func:`patch_compute_advantage` replaces verl's
  ``compute_advantage`` for one estimator name, and leaves every other name to
  verl. The v1 trainer (verl 0.9's default) hands it only the old, rollout and
  reference log-probs, so there the teacher is a column among those
  (``teacher="ref_log_prob"``: a reference worker serving the teacher); the legacy
  RayPPOTrainer (``trainer.use_v1=False``) hands it the whole batch.

The client comes from the environment (``REFLEXA_URL``, ``REFLEXA_API_KEY``: a key
with the distill permission) unless one is given. torch is imported only by the
functions that take tensors; numpy, when installed, carries the binary body.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from reflexa._advantage_batches import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_GROUP_SIZE,
    DEFAULT_MAX_TOKENS,
    BatchedAdvantagesResponse,
)
from reflexa.client import Client

if TYPE_CHECKING:
    from reflexa.binary_advantages import ArrayAdvantages

STUDENT, ROLLOUT, REF = "old_log_probs", "rollout_log_probs", "ref_log_prob"
DEFAULT_TEACHER = "teacher_log_probs"
OUTCOME_METHODS = ("grpo", "rloo")
TEACHER_METHODS = ("token_signal", "step_shaping", "horizon_agreement")
REGISTERED = {"reflexa_grpo": "grpo", "reflexa_rloo": "rloo"}


def _has(batch: Any, key: str) -> bool:
    return key in batch.keys()  # noqa: SIM118 - a TensorDict refuses `key in td`


def response_mask(batch: Any) -> Any:
    """(B, L) 1 where a response token counts: verl's ``response_mask``, else the
    response's slice of ``attention_mask`` (verl before ``response_mask``)."""
    if _has(batch, "response_mask"):
        return batch["response_mask"]
    length = batch["responses"].shape[-1]
    return batch["attention_mask"][:, -length:]


def _reads(method: str, params: Mapping[str, Any] | None) -> tuple[bool, bool, bool]:
    """(student, rollout, ref): which of verl's log-prob columns the request needs."""
    params = params or {}
    rollout, ref = params.get("is") is not None, params.get("kl") is not None
    return method not in OUTCOME_METHODS or rollout or ref, rollout, ref


def _floats(tensor: Any) -> Any:
    """A CPU numpy view of a log-prob tensor: float32 and float64 as they are (no copy on
    the CPU), any other dtype (bfloat16) as float32, which the binary body takes."""
    import torch

    tensor = tensor.detach().to("cpu")
    if tensor.dtype not in (torch.float32, torch.float64):
        tensor = tensor.float()
    return tensor.numpy()


def rollout_groups(
    rewards: Any,
    mask: Any,
    index: Any,
    logprobs: Mapping[str, Any] | None = None,
    teachers: Mapping[str, Any] | None = None,
    *,
    arrays: bool = False,
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """(the request's groups, the row of each trajectory in request order, each row's
    tokens sent). ``rewards`` (B,), ``mask`` (B, L), ``index`` B group keys;
    ``logprobs`` {student | rollout | ref: (B, L)}, ``teachers`` {NAME: (B, L)}.
    ``arrays``: the per-token values as numpy views of the tensors (their own dtype,
    for the binary body), not lists."""
    import torch

    mask = mask.detach().to("cpu")
    width = mask.shape[-1]
    on = mask != 0
    # the last position with mask 1, + 1 (0 for a row without any): padding trimmed
    last = torch.where(on.any(dim=-1), width - on.flip(-1).int().argmax(dim=-1), torch.zeros(len(on), dtype=torch.long))
    lengths = last.tolist()
    reward = rewards.detach().to("cpu", torch.float64).tolist()
    if arrays:
        flags: Any = on.numpy()
        series = {k: _floats(v) for k, v in (logprobs or {}).items()}
        named = {k: _floats(v) for k, v in (teachers or {}).items()}
    else:
        flags = on.int().tolist()
        series = {k: v.detach().to("cpu", torch.float64) for k, v in (logprobs or {}).items()}
        named = {k: v.detach().to("cpu", torch.float64) for k, v in (teachers or {}).items()}

    def row_of(values: Any, row: int, n: int) -> Any:
        return values[row, :n] if arrays else values[row, :n].tolist()

    order: dict[Any, list[int]] = {}
    for row, key in enumerate(index.tolist() if hasattr(index, "tolist") else list(index)):
        order.setdefault(key, []).append(row)
    groups, rows = [], []
    for g, members in enumerate(order.values()):
        trajectories = []
        for row in members:
            n = lengths[row]
            traj: dict[str, Any] = {"id": f"row-{row}", "reward": reward[row], "mask": flags[row][:n]}
            lp = {k: row_of(v, row, n) for k, v in series.items()}
            if named:
                lp["teacher"] = {k: row_of(v, row, n) for k, v in named.items()}
            if lp:
                traj["logprobs"] = lp
            trajectories.append(traj)
            rows.append(row)
        groups.append({"group_id": f"uid-{g}", "trajectories": trajectories})
    return groups, rows, lengths


def advantages_tensor(answer: BatchedAdvantagesResponse, rows: list[int], lengths: list[int], like: Any) -> Any:
    """(B, L) float32 advantages on ``like``'s device: each row's answer in its first
    tokens, 0 in the padding."""
    import torch

    out = torch.zeros(like.shape, dtype=torch.float32)
    for row, traj in zip(rows, answer.trajectories, strict=True):
        if lengths[row]:
            out[row, : lengths[row]] = torch.tensor(traj.advantages, dtype=torch.float32)
    return out.to(like.device)


def _client(client: Client | None) -> Client:
    return client if client is not None else Client()


def _one_binary_request(
    groups: list[dict[str, Any]], lengths: list[int], token_bytes: int, limits: Mapping[str, Any]
) -> bool:
    """Whether the batch fits one request under the limits (``token_bytes``: the
    columns' bytes per token)."""
    tokens = sum(lengths)
    rough_bytes = token_bytes * tokens + 512 * len(lengths)  # a generous header per trajectory
    largest = max((len(g["trajectories"]) for g in groups), default=0)
    return (
        tokens <= (limits.get("max_tokens") or DEFAULT_MAX_TOKENS)
        and largest <= (limits.get("max_group_size") or DEFAULT_MAX_GROUP_SIZE)
        and rough_bytes <= (limits.get("max_bytes") or DEFAULT_MAX_BYTES)
    )


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def shaped_advantages(
    client: Client,
    method: str,
    params: Mapping[str, Any] | None,
    rewards: Any,
    mask: Any,
    index: Any,
    logprobs: Mapping[str, Any] | None = None,
    teachers: Mapping[str, Any] | None = None,
    limits: Mapping[str, Any] | None = None,
) -> tuple[Any, BatchedAdvantagesResponse | ArrayAdvantages]:
    """((B, L) float32 advantages on the mask's device, the answer). A batch that fits
    one request goes as the binary body (the tensors' bytes, float64 answer columns
    written back in one scatter); a bigger one through ``distill_advantages_batched``
    (JSON, split under the limits). The numbers are the same, to the bit."""
    limits = dict(limits or {})
    binary = _has_numpy()
    if binary:
        groups, rows, lengths = rollout_groups(rewards, mask, index, logprobs, teachers, arrays=True)
        first = groups[0]["trajectories"][0] if groups else {}
        lp = first.get("logprobs", {})
        series = [v for k, v in lp.items() if k != "teacher"] + list(lp.get("teacher", {}).values())
        token_bytes = 1 + sum(v.itemsize for v in series)  # the mask's byte and each log-prob's
        binary = _one_binary_request(groups, lengths, token_bytes, limits)
    if not binary:
        groups, rows, lengths = rollout_groups(rewards, mask, index, logprobs, teachers)
        answer = client.distill_advantages_batched(method, groups, params=params, **limits)  # type: ignore[arg-type]
        return advantages_tensor(answer, rows, lengths, mask), answer
    import torch

    arrays = client.distill_advantages_arrays(method, groups, params=params)  # type: ignore[arg-type]
    out = torch.zeros(mask.shape, dtype=torch.float32)
    if rows:
        order = torch.tensor(rows)
        sent = torch.tensor(lengths)[order]
        keep = torch.arange(mask.shape[-1])[None, :] < sent[:, None]  # each row's first tokens, in request order
        block = torch.zeros((len(rows), mask.shape[-1]), dtype=torch.float32)
        block[keep] = torch.from_numpy(arrays.advantages.astype("float32"))
        out[order] = block
    return out.to(mask.device), arrays


def compute_advantages(
    data: Any,
    method: str = "grpo",
    params: Mapping[str, Any] | None = None,
    *,
    client: Client | None = None,
    teacher: str | Mapping[str, str] = DEFAULT_TEACHER,
    max_tokens: int | None = None,
    max_group_size: int | None = None,
    max_bytes: int | None = None,
) -> BatchedAdvantagesResponse | ArrayAdvantages:
    """Write ``data.batch["advantages"]`` and ``["returns"]`` for a verl ``DataProto``
    (anything with verl's ``batch`` and ``non_tensor_batch``); returns the answer
    (its ``diagnostics``): a batch that fits one request goes as the binary body and
    answers an :class:`~reflexa.binary_advantages.ArrayAdvantages`, a bigger one is
    split (JSON) and answers a ``BatchedAdvantagesResponse``. ``teacher``: the
    column(s) holding the teacher's log-probs of the response tokens, read only by
    the methods that use a teacher."""
    batch = data.batch
    mask = response_mask(batch)
    student, rollout, ref = _reads(method, params)
    columns = {"student": STUDENT if student else None, "rollout": ROLLOUT if rollout else None}
    columns["ref"] = REF if ref else None
    for name, column in columns.items():
        if column is not None and not _has(batch, column):
            raise KeyError(f"{method} with these params needs logprobs.{name}: data.batch[{column!r}] is missing")
    teachers: dict[str, Any] = {}
    if method in TEACHER_METHODS:
        wanted = {"default": teacher} if isinstance(teacher, str) else dict(teacher)
        for name, column in wanted.items():
            if not _has(batch, column):
                raise KeyError(
                    f"{method} needs the teacher's log-probs of the response tokens: data.batch[{column!r}] is missing"
                )
            teachers[name] = batch[column]
    logprobs = {name: batch[column] for name, column in columns.items() if column is not None}
    rewards = batch["token_level_rewards"].sum(dim=-1)
    limits = {"max_tokens": max_tokens, "max_group_size": max_group_size, "max_bytes": max_bytes}
    advantages, answer = shaped_advantages(
        _client(client), method, params, rewards, mask, data.non_tensor_batch["uid"], logprobs, teachers, limits
    )
    batch["advantages"] = advantages
    batch["returns"] = advantages
    return answer


def estimator(
    method: str = "grpo", params: Mapping[str, Any] | None = None, *, client: Client | None = None, **limits: Any
) -> Callable[..., tuple[Any, Any]]:
    """An advantage estimator for verl's registry (``register_adv_est(NAME)(estimator("rloo"))``):
    ``fn(token_level_rewards, response_mask, index, config=None, **kwargs) -> (advantages, returns)``.
    Outcome methods only: a registered estimator is given no log-probs."""
    if method not in OUTCOME_METHODS or any(_reads(method, params)[1:]):
        raise ValueError(
            f"{method} with params {dict(params or {})} reads log-probs, which verl does not pass to a registered "
            "estimator: use patch_compute_advantage"
        )
    made: list[Client] = []

    def reflexa_estimator(
        token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None, **kwargs: Any
    ) -> tuple[Any, Any]:
        if index is None:
            raise ValueError("Reflexa's advantages are group-relative: verl passes `index` (the uids) to estimators")
        chosen = dict(params or {})
        norm = getattr(config, "norm_adv_by_std_in_grpo", None) if config is not None else None
        if norm is not None and method == "grpo" and "std" not in chosen and "scale" not in chosen:
            chosen["std"] = bool(norm)
        if client is None and not made:
            made.append(Client())
        advantages, _ = shaped_advantages(
            client or made[0], method, chosen, token_level_rewards.sum(dim=-1), response_mask, index, limits=limits
        )
        return advantages, advantages

    reflexa_estimator.__name__ = f"reflexa_{method}"
    return reflexa_estimator


def patch_compute_advantage(
    name: str,
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    client: Client | None = None,
    teacher: str | Mapping[str, str] = DEFAULT_TEACHER,
    **limits: Any,
) -> None:
    """Make verl's ``compute_advantage`` answer ``algorithm.adv_estimator=NAME`` with
    ``method`` (every other estimator goes to verl's own). Replaces it where verl's
    trainers call it: ``verl.trainer.ppo.ray_trainer`` (RayPPOTrainer.fit, the whole
    batch) and ``verl.trainer.ppo.v1.utils`` (the v1 trainer, when its
    transfer_queue is installed; it passes only uid, response_mask, rm_scores and the
    old, rollout and reference log-probs). Call it in the processes that run them (a
    module named in ``VERL_USE_EXTERNAL_MODULES``)."""
    import importlib

    for module_name in PATCHED:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if module_name == PATCHED[0]:
                raise
            continue
        original = getattr(module.compute_advantage, "reflexa_original", module.compute_advantage)
        module.compute_advantage = _patched(original, name, method, params, client, teacher, limits)


PATCHED = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils")


def _patched(
    original: Callable[..., Any],
    name: str,
    method: str,
    params: Mapping[str, Any] | None,
    client: Client | None,
    teacher: str | Mapping[str, str],
    limits: Mapping[str, Any],
) -> Callable[..., Any]:
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(adv_estimator, "value", adv_estimator) != name:
            return original(data, adv_estimator, *args, **kwargs)
        compute_advantages(data, method, params, client=client, teacher=teacher, **limits)
        return data

    compute_advantage.reflexa_original = original  # type: ignore[attr-defined]
    return compute_advantage


def register() -> None:
    """Register ``reflexa_grpo`` and ``reflexa_rloo`` in verl's estimator registry (once)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, method in REGISTERED.items():
        if name not in ADV_ESTIMATOR_REGISTRY:
            register_adv_est(name)(estimator(method))


with contextlib.suppress(ImportError):  # without verl, the functions above still work on verl-shaped batches
    register()
