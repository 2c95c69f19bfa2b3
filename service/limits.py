"""Input limits that depend on settings, checked after the schema has parsed.

Pydantic checks shape and types; this walks a parsed request once and refuses, with
the field path and the rule, anything too large or that the databases cannot store
(NUL characters, lone UTF-16 surrogates).
"""

from __future__ import annotations

import math
import re
from typing import Any

from service.errors import InvalidInput
from service.settings import Limits
from service.trajectories.schemas import StepCreate, TrajectoryCreate

# PostgreSQL text cannot hold NUL; lone surrogates are not encodable as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class LimitChecker:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def text(self, value: str | None, field: str) -> None:
        if value is None:
            return
        if len(value) > self.limits.max_text_chars:
            raise InvalidInput(
                f"{field} is {len(value)} characters; at most {self.limits.max_text_chars} are accepted",
                field=field,
                rule="max_text_chars",
            )
        bad = _UNSTORABLE.search(value)
        if bad:
            what = "a NUL character" if bad.group() == "\x00" else "an unpaired UTF-16 surrogate"
            raise InvalidInput(f"{field} contains {what} at position {bad.start()}", field=field, rule="valid_unicode")

    def json(self, value: Any, field: str) -> None:
        """Structured values: bounded depth and size, every string and key storable."""
        if value is None:
            return
        budget = [self.limits.max_json_bytes]

        def walk(node: Any, path: str, depth: int) -> None:
            if depth > self.limits.max_json_depth:
                raise InvalidInput(
                    f"{field} is nested deeper than {self.limits.max_json_depth} levels",
                    field=path,
                    rule="max_json_depth",
                )
            if isinstance(node, str):
                self.text(node, path)
                budget[0] -= len(node) + 2
            elif isinstance(node, dict):
                for key, item in node.items():
                    self.text(key, f"{path}.{key}")
                    budget[0] -= len(key) + 4
                    walk(item, f"{path}.{key}", depth + 1)
            elif isinstance(node, list):
                for i, item in enumerate(node):
                    walk(item, f"{path}[{i}]", depth + 1)
                    budget[0] -= 1
            elif isinstance(node, float) and not math.isfinite(node):
                # Python's JSON parser accepts NaN/Infinity; JSON columns cannot store them.
                raise InvalidInput(f"{path} is {node}; numbers must be finite", field=path, rule="finite_number")
            else:
                budget[0] -= 8
            if budget[0] < 0:
                raise InvalidInput(
                    f"{field} is larger than {self.limits.max_json_bytes} bytes as JSON",
                    field=field,
                    rule="max_json_bytes",
                )

        walk(value, field, 1)

    def step_count(self, n: int, field: str) -> None:
        if n > self.limits.max_steps_per_request:
            raise InvalidInput(
                f"{field} has {n} steps; at most {self.limits.max_steps_per_request} per request",
                field=field,
                rule="max_steps_per_request",
            )

    def step(self, step: StepCreate, field: str) -> None:
        self.text(step.state.observation, f"{field}.state.observation")
        self.json(step.state.data, f"{field}.state.data")
        self.text(step.internal_state, f"{field}.internal_state")
        if isinstance(step.action, str):
            self.text(step.action, f"{field}.action")
        else:
            self.json(step.action, f"{field}.action")
        self.text(step.result, f"{field}.result")
        self.text(step.error, f"{field}.error")
        self.json(step.metadata, f"{field}.metadata")

    def steps(self, steps: list[StepCreate], field: str) -> None:
        self.step_count(len(steps), field)
        for i, step in enumerate(steps):
            self.step(step, f"{field}[{i}]")

    def trajectory(self, traj: TrajectoryCreate, field: str = "") -> None:
        prefix = f"{field}." if field else ""
        self.text(traj.task, f"{prefix}task")
        for name in ("environment", "agent", "policy_version"):
            self.text(getattr(traj, name), f"{prefix}{name}")
        self.json(traj.metadata, f"{prefix}metadata")
        if traj.outcome is not None:
            self.text(traj.outcome.failure_reason, f"{prefix}outcome.failure_reason")
            self.json(traj.outcome.details, f"{prefix}outcome.details")
        self.steps(traj.steps, f"{prefix}steps")

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
