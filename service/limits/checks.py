"""Input limits that depend on meaning and settings, checked after the schema has
parsed: the size and depth of structured JSON values, steps per request, items
per batch. (What storage cannot hold at all, in any field, is refused earlier by
service.limits.storable, for every route.)"""

from __future__ import annotations

from typing import Any

import orjson

from domain.errors import InvalidInput
from service.settings import Limits
from service.trajectories.schemas import StepCreate, TrajectoryCreate

MAX_TOKEN_ID = 2**31 - 1  # token ids are int32 in the trajectories export


_CONTAINERS = (dict, list)  # a tuple: isinstance checks it faster than a union


def _nesting(value: Any, most: int) -> int:
    """The depth of the deepest node of a JSON value, the value itself being at 1
    (as LimitChecker.json counts: a scalar inside a container is a node too); it
    stops counting past `most`."""
    depth, level = 1, [value] if isinstance(value, _CONTAINERS) else []
    while level and depth <= most:
        if not any(level):  # only empty containers: nothing below them
            return depth
        depth += 1
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
    return depth


class LimitChecker:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def json(self, value: Any, field: str) -> None:
        """A structured value (state data, an action object, metadata): bounded depth
        and size as JSON."""
        if value is None or self._plainly_within(value):
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

    def _plainly_within(self, value: Any) -> bool:
        """True when the walk below certainly passes `value`, decided mostly in C (a
        step's state data in ~1 us, where the walk takes ~2 us and more with size).
        The walk's size is at most 8 bytes a byte of compact JSON (a string counts its
        characters and quotes, a container its keys and separators, any other value
        8, and each of these takes at least a byte), and its depth is the nesting of
        the containers, counted here without building their paths. False decides
        nothing: the walk runs, and names the field."""
        try:
            size = len(orjson.dumps(value))
        except orjson.JSONEncodeError:  # not plain JSON (an integer beyond 64 bits): the walk judges it
            return False
        return 8 * size <= self.limits.max_json_bytes and _nesting(value, self.limits.max_json_depth) <= (
            self.limits.max_json_depth
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
