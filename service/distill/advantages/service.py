"""Shaped advantages for trainers: validate the batch (every per-token array of a
trajectory the same length, masks 0/1, steps non-decreasing, log-probs <= 0),
flatten it onto one token axis (service.distill.signals.TokenBatch), compute, and answer
per trajectory aligned with its tokens. No database: nothing is stored.

One loop runs per trajectory (checking its arrays: the route's body decoder hands
them over as numpy arrays already, lists only where pydantic validated them);
everything per token is numpy over the whole batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import ValidationError

from domain.errors import InvalidInput
from service.auth import Permission, Principal
from service.distill.advantages.schemas import (
    AdvantagesRequest,
    AdvantagesResponse,
    AdvantageTrajectory,
    BatchDiagnostics,
    Diagnostics,
    GroupDiagnostics,
    TrajectoryAdvantages,
)
from service.distill.signals import DEFAULT_NAME, PARAMS, Needs, Params, TokenBatch, compute, needs
from service.distill.signals.batch import TrajectoryTokens, concat
from service.distill.signals.compute import Result, resolved
from service.settings import Limits

LOGPROB_TOLERANCE = 1e-3  # a log-probability is <= 0; this much above is rounding, more is a sign error
ENTROPY_TOLERANCE = 1e-6


def parse_params(method: str, params: dict[str, Any] | None) -> Params:
    """The method's parameter model; errors name `params.<name>`."""
    model = PARAMS[method]
    try:
        return model.model_validate_json(json.dumps(params or {}))  # JSON mode: [low, high] is a valid tuple
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        field_name = f"params.{loc}" if loc else "params"
        if err["type"] == "extra_forbidden":
            known = sorted(f.alias or name for name, f in model.model_fields.items())
            message = f"{field_name} is not a parameter of {method} (its parameters: {', '.join(known)})"
        else:
            message = f"{field_name}: {err['msg']}"
        raise InvalidInput(message, field=field_name, rule=err["type"]) from None


# A per-token series is a list (pydantic's) or a numpy array (service.distill.advantages.body
# turns the lists it can into arrays before validation); both read alike below.
Series = list[float] | np.ndarray


def _named(value: Series | dict[str, Series] | None) -> dict[str, Series]:
    if value is None:
        return {}
    return value if isinstance(value, dict) else {DEFAULT_NAME: value}


def _named_field(path: str, value: Series | dict[str, Series], name: str) -> str:
    return f"{path}.{name}" if isinstance(value, dict) else path


def _per_token_fields(traj: AdvantageTrajectory, path: str) -> Iterator[tuple[str, int]]:
    """(field path, length) of every per-token array the trajectory sent, the log-probs
    first (a mismatch names the array that disagrees with them)."""
    lp = traj.logprobs
    if lp is not None:
        if lp.student is not None:
            yield f"{path}.logprobs.student", len(lp.student)
        for kind in ("teacher", "pre", "post"):
            value = getattr(lp, kind)
            for name, values in _named(value).items():
                yield _named_field(f"{path}.logprobs.{kind}", value, name), len(values)
        for kind in ("rollout", "ref"):
            values = getattr(lp, kind)
            if values is not None:
                yield f"{path}.logprobs.{kind}", len(values)
    if traj.mask is not None:
        yield f"{path}.mask", len(traj.mask)
    if traj.token_steps is not None:
        yield f"{path}.token_steps", len(traj.token_steps)
    if traj.teacher_entropy is not None:
        yield f"{path}.teacher_entropy", len(traj.teacher_entropy)
    if traj.teacher_topk is not None:
        yield f"{path}.teacher_topk.teacher", len(traj.teacher_topk.teacher)
        yield f"{path}.teacher_topk.student", len(traj.teacher_topk.student)
    if isinstance(traj.advantages, list | np.ndarray):
        yield f"{path}.advantages", len(traj.advantages)


def _length(traj: AdvantageTrajectory, path: str) -> int:
    """The trajectory's token count: every per-token array it sent has it (0 when none was sent)."""
    first: tuple[str, int] | None = None
    for name, n in _per_token_fields(traj, path):
        if first is None:
            first = (name, n)
        elif n != first[1]:
            raise InvalidInput(
                f"{name} has {n} tokens but {first[0]} has {first[1]}; every per-token array of a trajectory "
                "has one entry per token",
                field=name,
                rule="same_length",
            )
    return first[1] if first else 0


def _first_bad(bad: np.ndarray) -> int | None:
    idx = np.flatnonzero(bad)
    return int(idx[0]) if len(idx) else None


def _logprobs(values: Series, name: str, mask: np.ndarray) -> np.ndarray:
    """Log-probs, <= 0 on the tokens that count (what masked tokens hold is never read)."""
    arr = np.asarray(values, dtype=np.float64)
    i = _first_bad((arr > LOGPROB_TOLERANCE) & mask)
    if i is not None:
        raise InvalidInput(
            f"{name}[{i}] is {arr[i]:g}; a log-probability is <= 0 (send log π(y_t), not −log π)",
            field=f"{name}[{i}]",
            rule="logprob",
        )
    return arr


def _matrix(values: list[list[float]], name: str, mask: np.ndarray) -> np.ndarray:
    """A (tokens × k) block of log-probs, k the same for every row."""
    widths = {len(row) for row in values}
    if len(widths) != 1 or 0 in widths:
        raise InvalidInput(
            f"{name}: every row has the same k >= 1 entries (got row lengths {sorted(widths)[:5]})",
            field=name,
            rule="rectangular",
        )
    arr = np.asarray(values, dtype=np.float64)
    bad = np.argwhere((arr > LOGPROB_TOLERANCE) & mask[:, None])
    if len(bad):
        row, col = (int(x) for x in bad[0])
        raise InvalidInput(
            f"{name}[{row}][{col}] is {arr[row, col]:g}; a log-probability is <= 0",
            field=f"{name}[{row}][{col}]",
            rule="logprob",
        )
    return arr


def _ints(values: list[int] | np.ndarray, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        raise InvalidInput(f"{name} holds an integer beyond 64 bits", field=name, rule="int64") from None


def _checked_masks_and_steps(
    body: AdvantagesRequest,
) -> dict[tuple[int, int], tuple[np.ndarray | None, np.ndarray | None]] | None:
    """Every trajectory's sent mask (as booleans) and token_steps, checked in a few
    numpy passes over all of them at once instead of a few per trajectory (~0.4 ms of
    a 64-trajectory grpo request, docs/benchmarks.md). None when any of
    them is out of its rule, or not an array of 64-bit integers: the per-trajectory
    checks then run as before and name the first bad value (`AdvantageService._mask`,
    `_steps`). A trajectory that sent neither is absent."""
    keys: list[tuple[int, int]] = []
    masks: list[np.ndarray | None] = []
    steps: list[np.ndarray | None] = []
    try:
        for gi, group in enumerate(body.groups):
            for ti, traj in enumerate(group.trajectories):
                if traj.mask is None and traj.token_steps is None:
                    continue
                keys.append((gi, ti))
                masks.append(None if traj.mask is None else np.asarray(traj.mask, dtype=np.int64))
                steps.append(None if traj.token_steps is None else np.asarray(traj.token_steps, dtype=np.int64))
    except (OverflowError, TypeError, ValueError):
        return None
    sent_masks = [m for m in masks if m is not None]
    if sent_masks:
        flat = np.concatenate(sent_masks)
        if ((flat != 0) & (flat != 1)).any():
            return None
    sent_steps = [x for x in steps if x is not None]
    if sent_steps:
        flat = np.concatenate(sent_steps)
        if (flat < 0).any():
            return None
        # non-decreasing within each trajectory: the difference across a boundary
        # between two trajectories (an index b with 0 < b < len(flat)) is left out
        starts = np.cumsum([len(x) for x in sent_steps])[:-1]
        inner = np.ones(max(len(flat) - 1, 0), dtype=bool)
        inner[starts[(starts > 0) & (starts < len(flat))] - 1] = False
        if (np.diff(flat)[inner] < 0).any():
            return None
    return {key: (None if m is None else m.astype(bool), x) for key, m, x in zip(keys, masks, steps, strict=True)}


def logprob_names(body: AdvantagesRequest) -> dict[str, set[str]]:
    """The names of the teacher, pre and post logprob series the body's trajectories send."""
    names: dict[str, set[str]] = {"teacher": set(), "pre": set(), "post": set()}
    for group in body.groups:
        for traj in group.trajectories:
            if traj.logprobs is not None:
                for kind, seen in names.items():
                    seen.update(_named(getattr(traj.logprobs, kind)))
    return names


class AdvantageService:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def compute(self, principal: Principal, body: AdvantagesRequest) -> AdvantagesResponse:
        principal.require(Permission.DISTILL)
        params = parse_params(body.method, body.params)
        self.check_size(body)
        names = logprob_names(body)
        need = needs(body.method, params, names["teacher"], names["post"], names["pre"])
        batch = self.batch(body, need, params)
        result = compute(batch, body.method, params, need)
        return self.response(body, resolved(params, need), batch, result)

    def check_size(self, body: AdvantagesRequest) -> None:
        most_group = self.limits.max_advantage_group_size
        seen_groups: set[str] = set()
        seen_ids: set[str] = set()
        total = 0
        for gi, group in enumerate(body.groups):
            if len(group.trajectories) > most_group:
                raise InvalidInput(
                    f"groups[{gi}] has {len(group.trajectories)} trajectories; at most {most_group} per group",
                    field=f"groups[{gi}].trajectories",
                    rule="max_advantage_group_size",
                )
            if group.group_id in seen_groups:
                raise InvalidInput(
                    f"groups[{gi}].group_id {group.group_id!r} appears twice; send each rollout group once",
                    field=f"groups[{gi}].group_id",
                    rule="unique",
                )
            seen_groups.add(group.group_id)
            for ti, traj in enumerate(group.trajectories):
                if traj.id in seen_ids:
                    raise InvalidInput(
                        f"groups[{gi}].trajectories[{ti}].id {traj.id!r} appears twice in the batch",
                        field=f"groups[{gi}].trajectories[{ti}].id",
                        rule="unique",
                    )
                seen_ids.add(traj.id)
                total += _length(traj, f"groups[{gi}].trajectories[{ti}]")
        if total > self.limits.max_advantage_tokens:
            raise InvalidInput(
                f"groups hold {total} tokens; at most {self.limits.max_advantage_tokens} per request (split the batch "
                "by groups)",
                field="groups",
                rule="max_advantage_tokens",
            )

    def batch(self, body: AdvantagesRequest, need: Needs, params: Params) -> TokenBatch:
        wanted = [("teacher", n) for n in need.teachers] + [("post", n) for n in need.post]
        wanted += [("pre", n) for n in need.pre]
        checked = _checked_masks_and_steps(body)
        groups = []
        for gi, group in enumerate(body.groups):
            members = []
            for ti, traj in enumerate(group.trajectories):
                path = f"groups[{gi}].trajectories[{ti}]"
                n = _length(traj, path)
                given = checked.get((gi, ti)) if checked is not None else None
                mask = given[0] if given is not None and given[0] is not None else self._mask(traj, path, n)
                if traj.reward is None and getattr(params, "null_rewards", "refuse") == "refuse":
                    raise InvalidInput(
                        f'{path}.reward is null; send the outcome reward, or params.null_rewards: "trl" to leave '
                        "an unscored trajectory out of its group's baseline (its advantage 0)",
                        field=f"{path}.reward",
                        rule="required",
                    )
                named: dict[str, dict[str, np.ndarray]] = {"teacher": {}, "pre": {}, "post": {}}
                lp = traj.logprobs
                student = None
                if need.student:
                    if lp is None or lp.student is None:
                        raise InvalidInput(
                            f"{path}.logprobs.student is required by {body.method}",
                            field=f"{path}.logprobs.student",
                            rule="required",
                        )
                    student = _logprobs(lp.student, f"{path}.logprobs.student", mask)
                off_policy: dict[str, np.ndarray] = {}
                for kind, wanted_here, why in (("rollout", need.rollout, "params.is"), ("ref", need.ref, "params.kl")):
                    if not wanted_here:
                        continue
                    values = getattr(lp, kind) if lp is not None else None
                    if values is None:
                        raise InvalidInput(
                            f"{path}.logprobs.{kind} is required by {why} (the same tokens' log-probs under the "
                            + ("inference engine" if kind == "rollout" else "reference model")
                            + ")",
                            field=f"{path}.logprobs.{kind}",
                            rule="required",
                        )
                    off_policy[kind] = _logprobs(values, f"{path}.logprobs.{kind}", mask)
                for kind, name in wanted:
                    value = getattr(lp, kind) if lp is not None else None
                    sent = _named(value)
                    if name not in sent:
                        where = f"{path}.logprobs.{kind}"
                        raise InvalidInput(
                            f"{where}.{name} is required by {body.method}"
                            + (f" (this trajectory sent {sorted(sent)})" if sent else ""),
                            field=f"{where}.{name}" if isinstance(value, dict) else where,
                            rule="required",
                        )
                    field_name = _named_field(f"{path}.logprobs.{kind}", value, name)  # type: ignore[arg-type]
                    named[kind][name] = _logprobs(sent[name], field_name, mask)
                topk_teacher = topk_student = None
                if traj.teacher_topk is not None and n:
                    topk_teacher = _matrix(traj.teacher_topk.teacher, f"{path}.teacher_topk.teacher", mask)
                    topk_student = _matrix(traj.teacher_topk.student, f"{path}.teacher_topk.student", mask)
                    if topk_teacher.shape != topk_student.shape:
                        raise InvalidInput(
                            f"{path}.teacher_topk.student has k = {topk_student.shape[1]} but teacher_topk.teacher "
                            f"has k = {topk_teacher.shape[1]}",
                            field=f"{path}.teacher_topk.student",
                            rule="same_length",
                        )
                adv = traj.advantages
                members.append(
                    TrajectoryTokens(
                        reward=traj.reward,
                        student=student,
                        rollout=off_policy.get("rollout"),
                        ref=off_policy.get("ref"),
                        teacher=named["teacher"],
                        pre=named["pre"],
                        post=named["post"],
                        mask=mask,
                        steps=given[1] if given is not None and given[1] is not None else self._steps(traj, path, n),
                        entropy=self._entropy(traj, path, mask),
                        topk_teacher=topk_teacher,
                        topk_student=topk_student,
                        advantages=np.asarray(adv, dtype=np.float64) if isinstance(adv, list | np.ndarray) else adv,
                    )
                )
            groups.append(members)
        return concat(groups)

    @staticmethod
    def _entropy(traj: AdvantageTrajectory, path: str, mask: np.ndarray) -> np.ndarray | None:
        if traj.teacher_entropy is None:
            return None
        entropy = np.asarray(traj.teacher_entropy, dtype=np.float64)
        i = _first_bad((entropy < -ENTROPY_TOLERANCE) & mask)
        if i is not None:
            raise InvalidInput(
                f"{path}.teacher_entropy[{i}] is {entropy[i]:g}; an entropy is >= 0",
                field=f"{path}.teacher_entropy[{i}]",
                rule="non_negative",
            )
        return np.maximum(entropy, 0.0)

    @staticmethod
    def _mask(traj: AdvantageTrajectory, path: str, n: int) -> np.ndarray:
        if traj.mask is None:
            return np.ones(n, dtype=bool)
        mask = _ints(traj.mask, f"{path}.mask")
        i = _first_bad((mask != 0) & (mask != 1))
        if i is not None:
            raise InvalidInput(
                f"{path}.mask[{i}] is {mask[i]}; a mask is 0 or 1", field=f"{path}.mask[{i}]", rule="binary"
            )
        return mask.astype(bool)

    @staticmethod
    def _steps(traj: AdvantageTrajectory, path: str, n: int) -> np.ndarray:
        if traj.token_steps is None:
            return np.zeros(n, dtype=np.int64)
        steps = _ints(traj.token_steps, f"{path}.token_steps")
        i = _first_bad(steps < 0)
        if i is not None:
            raise InvalidInput(
                f"{path}.token_steps[{i}] is {steps[i]}; steps are integers >= 0",
                field=f"{path}.token_steps[{i}]",
                rule="non_negative",
            )
        i = _first_bad(np.diff(steps) < 0)
        if i is not None:
            raise InvalidInput(
                f"{path}.token_steps[{i + 1}] is {steps[i + 1]} after {steps[i]}; token_steps is non-decreasing "
                "(tokens in order, a step one run)",
                field=f"{path}.token_steps[{i + 1}]",
                rule="non_decreasing",
            )
        return steps

    @staticmethod
    def response(
        body: AdvantagesRequest, params: dict[str, Any], batch: TokenBatch, result: Result
    ) -> AdvantagesResponse:
        """The answer; its per-token fields (advantages, token_rewards, is_weights, kl)
        are float64 numpy views of one array each, which service.distill.advantages.body
        writes as JSON or as binary columns without a list per token."""
        shaped = result.shaped
        offsets = batch.offsets.tolist()

        def floats(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else np.asarray(values, dtype=np.float64)

        advantages = floats(shaped.advantages)
        rewards = floats(shaped.signal.value) if shaped.signal is not None else None
        step_cols = None
        if shaped.step_signal is not None:
            steps = batch.steps
            bounds = np.searchsorted(steps.traj, np.arange(batch.trajectory_count + 1)).tolist()
            step_cols = (bounds, steps.index.tolist(), shaped.step_signal.tolist(), shaped.step_scale.tolist())
        scalar = result.scalar_advantage.tolist()
        weights = floats(result.is_weights)
        kl = floats(result.kl)
        out = []
        t = 0
        for group in body.groups:
            for traj in group.trajectories:
                lo, hi = offsets[t], offsets[t + 1]
                row: dict[str, Any] = {
                    "id": traj.id,
                    "group_id": group.group_id,
                    "advantage": None if np.isnan(scalar[t]) else scalar[t],
                    "advantages": advantages[lo:hi],  # type: ignore[index]
                    "token_rewards": rewards[lo:hi] if rewards is not None else None,
                }
                if weights is not None:
                    row["is_weights"] = weights[lo:hi]
                if kl is not None:
                    row["kl"] = kl[lo:hi]
                if step_cols is not None:
                    bounds, index, signal, scale = step_cols
                    a, b = bounds[t], bounds[t + 1]
                    row |= {"steps": index[a:b], "step_signal": signal[a:b], "step_scale": scale[a:b]}
                out.append(TrajectoryAdvantages.model_construct(**row))
                t += 1
        groups = [
            GroupDiagnostics.model_construct(group_id=g.group_id, **row)
            for g, row in zip(body.groups, result.groups, strict=True)
        ]
        return AdvantagesResponse.model_construct(
            method=body.method,
            params=params,
            trajectories=out,
            diagnostics=Diagnostics.model_construct(
                batch=BatchDiagnostics.model_validate(result.diagnostics), groups=groups
            ),
        )
