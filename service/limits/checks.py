"""Input limits that depend on meaning and settings, checked after the schema has
parsed: the size and depth of structured JSON values, steps per request, items
per batch. (What storage cannot hold at all, in any field, is refused earlier by
service.limits.storable, for every route.)"""

from __future__ import annotations

from typing import Any

from domain.errors import InvalidInput
from service.settings import Limits
from service.trajectories.schemas import StepCreate, TrajectoryCreate

MAX_TOKEN_ID = 2**31 - 1  # token ids are int32 in the trajectories export


class LimitChecker:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def json(self, value: Any, field: str) -> None:
        """A structured value (state data, an action object, metadata): bounded depth
        and size as JSON."""
        if value is None:
            return
        budget = self.limits.max_json_bytes
        stack: list[tuple[Any, str, int]] = [(value, field, 1)]
        while stack:
            node, path, depth = stack.pop()
            if depth > self.limits.max_json_depth:
                raise InvalidInput(
                    f"{field} is nested deeper than {self.limits.max_json_depth} levels",
                    field=path,
                    rule="max_json_depth",
                )
            if isinstance(node, str):
                budget -= len(node) + 2
            elif isinstance(node, dict):
                budget -= sum(len(k) + 4 for k in node)
                stack.extend((item, f"{path}.{key}", depth + 1) for key, item in node.items())
            elif isinstance(node, list):
                budget -= len(node)
                stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node))
            else:
                budget -= 8
            if budget < 0:
                raise InvalidInput(
                    f"{field} is larger than {self.limits.max_json_bytes} bytes as JSON",
                    field=field,
                    rule="max_json_bytes",
                )

    def step_count(self, n: int, field: str) -> None:
        if n > self.limits.max_steps_per_request:
            raise InvalidInput(
                f"{field} has {n} steps; at most {self.limits.max_steps_per_request} per request",
                field=field,
                rule="max_steps_per_request",
            )

    def step(self, step: StepCreate, field: str) -> None:
        self.json(step.state.data, f"{field}.state.data")
        if not isinstance(step.action, str):
            self.json(step.action, f"{field}.action")
        self.json(step.metadata, f"{field}.metadata")
        self.rollout(step, field)

    def rollout(self, step: StepCreate, field: str) -> None:
        """A step's rollout_logprobs and rollout_token_ids: at most
        `max_rollout_tokens_per_step` each, log-probs <= 0, token ids in int32, as
        many of both when both are given. (Non-finite numbers are refused earlier,
        by service.limits.storable, as `finite_number`.) The first offender is named."""
        most = self.limits.max_rollout_tokens_per_step
        logprobs, token_ids = step.rollout_logprobs, step.rollout_token_ids
        for name, values in (("rollout_logprobs", logprobs), ("rollout_token_ids", token_ids)):
            if values is not None and len(values) > most:
                raise InvalidInput(
                    f"{field}.{name} has {len(values)} tokens; at most {most} per step",
                    field=f"{field}.{name}",
                    rule="max_rollout_tokens_per_step",
                )
        if logprobs and max(logprobs) > 0:
            j = next(j for j, v in enumerate(logprobs) if v > 0)
            raise InvalidInput(
                f"{field}.rollout_logprobs[{j}] is {logprobs[j]:g}; a log-probability is <= 0 "
                "(send log p(token), not -log p)",
                field=f"{field}.rollout_logprobs[{j}]",
                rule="logprob",
            )
        if token_ids and (min(token_ids) < 0 or max(token_ids) > MAX_TOKEN_ID):
            j = next(j for j, v in enumerate(token_ids) if not 0 <= v <= MAX_TOKEN_ID)
            raise InvalidInput(
                f"{field}.rollout_token_ids[{j}] is {token_ids[j]}; a token id is 0 <= id < 2^31",
                field=f"{field}.rollout_token_ids[{j}]",
                rule="token_id",
            )
        if logprobs is not None and token_ids is not None and len(logprobs) != len(token_ids):
            raise InvalidInput(
                f"{field}.rollout_token_ids has {len(token_ids)} tokens but rollout_logprobs has {len(logprobs)}; "
                "one id per log-prob",
                field=f"{field}.rollout_token_ids",
                rule="same_length",
            )

    def steps(self, steps: list[StepCreate], field: str) -> None:
        self.step_count(len(steps), field)
        for i, step in enumerate(steps):
            self.step(step, f"{field}[{i}]")

    def trajectory(self, traj: TrajectoryCreate, field: str = "") -> None:
        prefix = f"{field}." if field else ""
        self.json(traj.metadata, f"{prefix}metadata")
        if traj.outcome is not None:
            self.json(traj.outcome.details, f"{prefix}outcome.details")
        self.steps(traj.steps, f"{prefix}steps")

    def batch_size(self, n: int, field: str, most: int) -> None:
        if n > most:
            raise InvalidInput(
                f"{field} has {n} items; at most {most} are accepted per batch", field=field, rule="max_batch"
            )

    def batch(self, trajectories: list[TrajectoryCreate]) -> None:
        if len(trajectories) > self.limits.max_batch_trajectories:
            raise InvalidInput(
                f"trajectories has {len(trajectories)} items; at most "
                f"{self.limits.max_batch_trajectories} are accepted per batch",
                field="trajectories",
                rule="max_batch_trajectories",
            )
        self.step_count(sum(len(t.steps) for t in trajectories), "trajectories[*].steps")
        for i, traj in enumerate(trajectories):
            self.trajectory(traj, f"trajectories[{i}]")
