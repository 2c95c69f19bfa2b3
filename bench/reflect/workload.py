"""Closed trajectories for the reflection benchmark, shaped like RL rollouts.

Reflection cost depends on how much of the input is new, so the shape matters more
than the wording: `tasks` tasks spread over `environments` environments; every task
has a fixed route of 10-20 states (an agent retrying a task sees the same rooms and
pages again), each state with its right action and 1-2 wrong ones. A rollout walks
the route; at each state it takes a wrong action with the task's error rate, and a
wrong action is fatal 1 time in 3 (the episode ends there, that step flagged
`caused_failure`). A `fresh` share of the states are new each time (a counter or a
changed detail: the observation differs), the rest are revisits that the exemplar
reflector merges instead of embedding again. Rollouts come in groups of 4-8 siblings
of one task (`group_id`), so evidence cards fire, and outcomes are mixed, so the
contrastive counts find actions to prefer and avoid.

Texts come from bench/common/agent_states.py (text games, grid worlds, web pages).
Deterministic: the same arguments give the same trajectories.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.common.agent_states import AgentState, corpus_states, unique_state

Trajectory = dict[str, Any]  # the v1 API's `TrajectoryCreate`, outcome included (closed on arrival)


@dataclass(frozen=True)
class Shape:
    trajectories: int = 10_000
    tasks: int = 300
    environments: int = 20
    fresh: float = 0.3  # share of steps whose state is new (not a revisit of the task's route)
    group_min: int = 4
    group_max: int = 8
    seed: int = 5  # the tasks; rollouts take their own seed, so later runs revisit the same tasks


@dataclass(frozen=True)
class _Slot:
    state: AgentState
    wrong: tuple[str, ...]  # actions that do not help here


@dataclass(frozen=True)
class _Task:
    text: str
    environment: str
    route: tuple[_Slot, ...]
    error_rate: float  # per step: how often this task's policy takes a wrong action


def _tasks(shape: Shape, rng: random.Random) -> list[_Task]:
    routes = [rng.randint(10, 20) for _ in range(shape.tasks)]
    pool = corpus_states(sum(routes))
    actions = sorted({s.action for s in pool})
    out, used = [], 0
    for t, length in enumerate(routes):
        states = pool[used : used + length]
        used += length
        slots = tuple(
            _Slot(s, tuple(a for a in rng.sample(actions, 3) if a != s.action)[: rng.randint(1, 2)]) for s in states
        )
        env = f"env-{t % shape.environments:02d}"
        out.append(_Task(f"task {t}: {states[0].thought}", env, slots, rng.uniform(0.01, 0.08)))
    return out


def _rollout(task: _Task, tag: str, group: str, shape: Shape, rng: random.Random) -> Trajectory:
    steps: list[dict[str, Any]] = []
    success = True
    for i, slot in enumerate(task.route):
        state = slot.state
        if rng.random() < shape.fresh:
            state = unique_state(rng, f"{tag}.{i}")
        wrong = rng.random() < task.error_rate * 3
        action = rng.choice(slot.wrong) if wrong else state.action
        fatal = wrong and rng.random() < 1 / 3
        steps.append(
            {
                "state": {"observation": state.observation},
                "internal_state": state.thought,
                "action": action,
                "result": "That did not work." if wrong else state.result,
                "caused_failure": fatal,
                "done": fatal or i == len(task.route) - 1,
            }
        )
        if fatal:
            success = False
            break
    return {
        "id": tag,
        "task": task.text,
        "environment": task.environment,
        "group_id": group,
        "steps": steps,
        "outcome": {"success": success, "reward": 1.0 if success else 0.0},
    }


def groups(shape: Shape, prefix: str = "r", rollout_seed: int = 0) -> Iterator[list[Trajectory]]:
    """Rollout groups in arrival order, `shape.trajectories` trajectories in all;
    ids start with `prefix` so several runs can share a database."""
    tasks = _tasks(shape, random.Random(shape.seed))
    rng = random.Random(rollout_seed)
    made = g = 0
    while made < shape.trajectories:
        task = tasks[rng.randrange(len(tasks))]
        size = min(rng.randint(shape.group_min, shape.group_max), shape.trajectories - made)
        group = f"{prefix}g{g}"
        yield [_rollout(task, f"{prefix}{made + j}", group, shape, rng) for j in range(size)]
        made += size
        g += 1
