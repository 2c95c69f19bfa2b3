"""Trajectories for bench.distill: a background memory and rollout batches.

`tasks` tasks spread over `environments` environments, each a fixed route of
`steps` states (text-game, grid and web states from bench/common/agent_states.py), each
state with its right action and 1-2 wrong ones. A rollout walks the whole route: at
each state it takes a wrong action with the task's error rate, and a wrong action is
fatal 1 time in 3 (that step flagged `caused_failure`, the attempt failed; the agent
goes on to the end of the route, so every trajectory has exactly `steps` steps). A
`fresh` share of the states are new each time (the observation differs), the rest
revisit the route. Correct actions at every fifth state earn a subgoal reward.

Background: rollout groups of 4-8 siblings of one task (`group_id`), the tasks taken
in turn (each round in a new order), attempt 1; about
half the failed rollouts are retried once (`parent_trajectory_id`, `attempt` 2, no
group). Rollout batches: groups of `group` rollouts, each batch on tasks of its own
(every batch's texts are new to the server's embedding cache, but for the route
states the background shares); in each group the last quarter are retries of a
failed background attempt at the task. Deterministic.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.common.agent_states import AgentState, corpus_states, unique_state

Trajectory = dict[str, Any]  # the v1 API's `TrajectoryCreate`, outcome included (closed on arrival)
SUBGOAL_EVERY = 5


@dataclass(frozen=True)
class Shape:
    background: int  # trajectories ingested (and reflected) before the rollout batches
    steps: int  # per trajectory
    tasks: int
    environments: int
    batch: int  # trajectories per rollout batch
    group: int  # rollouts per group in a batch
    batches: int  # measured rollout batches
    warm: int  # trajectories of the warm-up batch (not measured)
    fresh: float = 0.3
    seed: int = 17


@dataclass(frozen=True)
class _Task:
    index: int
    text: str
    environment: str
    route: tuple[AgentState, ...]
    wrong: tuple[tuple[str, ...], ...]  # per route state: actions that do not help there
    error_rate: float


class Workload:
    """The tasks, and the ids of failed background attempts per task (retry parents)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        rng = random.Random(shape.seed)
        pool = corpus_states(shape.tasks * shape.steps)
        actions = sorted({s.action for s in pool})
        self.tasks = []
        for t in range(shape.tasks):
            route = tuple(pool[t * shape.steps : (t + 1) * shape.steps])
            wrong = tuple(tuple(a for a in rng.sample(actions, 3) if a != s.action)[: rng.randint(1, 2)] for s in route)
            env = f"env-{t % shape.environments:02d}"
            self.tasks.append(_Task(t, f"task {t}: {route[0].thought}", env, route, wrong, rng.uniform(0.01, 0.06)))
        self.failed: dict[int, list[tuple[str, int]]] = defaultdict(list)  # task -> (id, attempt) of failures
        self._rng = random.Random(shape.seed + 1)

    def _rollout(self, task: _Task, tag: str, **head: Any) -> Trajectory:
        rng, steps, success = self._rng, [], True
        for i, state in enumerate(task.route):
            if rng.random() < self.shape.fresh:
                state = unique_state(rng, f"{tag}.{i}")
            wrong = rng.random() < task.error_rate * 3
            fatal = wrong and success and rng.random() < 1 / 3
            success = success and not fatal
            reward = 0.2 if not wrong and i % SUBGOAL_EVERY == SUBGOAL_EVERY - 1 else 0.0
            steps.append(
                {
                    "state": {"observation": state.observation},
                    "internal_state": state.thought,
                    "action": rng.choice(task.wrong[i]) if wrong else state.action,
                    "result": "That did not work." if wrong else state.result,
                    "reward": reward,
                    "caused_failure": fatal,
                    "done": i == len(task.route) - 1,
                }
            )
        outcome: dict[str, Any] = {"success": success, "reward": 1.0 if success else 0.0}
        if not success:
            outcome["failure_reason"] = "a wrong action ended any chance of finishing the task"
        return {
            "id": tag,
            "task": task.text,
            "environment": task.environment,
            **head,
            "steps": steps,
            "outcome": outcome,
        }

    def background(self) -> Iterator[list[Trajectory]]:
        """Rollout groups (then their retries) in arrival order, `shape.background` in all."""
        rng = random.Random(self.shape.seed + 2)
        made = g = 0
        order: list[_Task] = []
        while made < self.shape.background:
            if not order:  # every task in turn, in a new order each round (a curriculum's epochs)
                order = rng.sample(self.tasks, len(self.tasks))
            task = order.pop()
            size = min(rng.randint(4, 8), self.shape.background - made)
            group = [
                self._rollout(task, f"bg{made + j}", group_id=f"bgg{g}", attempt=1, policy_version="v1")
                for j in range(size)
            ]
            made += size
            g += 1
            retries = []
            for t in group:
                if t["outcome"]["success"]:
                    continue
                self.failed[task.index].append((t["id"], 1))
                if made < self.shape.background and rng.random() < 0.5:
                    retry = self._rollout(
                        task, f"{t['id']}-a2", parent_trajectory_id=t["id"], attempt=2, policy_version="v1"
                    )
                    if not retry["outcome"]["success"]:
                        self.failed[task.index].append((retry["id"], 2))
                    retries.append(retry)
                    made += 1
            yield group + retries

    def rollout_batch(self, name: str, size: int, first_task: int) -> list[Trajectory]:
        """`size` rollouts in groups of `shape.group`, group j on task first_task + j;
        the last quarter of each group retry a failed background attempt at its task."""
        out: list[Trajectory] = []
        per = self.shape.group
        for j in range(-(-size // per)):
            task = self.tasks[(first_task + j) % len(self.tasks)]
            parents = list(self.failed.get(task.index, ()))
            members = min(per, size - len(out))
            for m in range(members):
                head: dict[str, Any] = {"group_id": f"{name}g{j}", "policy_version": "v2", "attempt": 1}
                if m >= members - max(1, members // 4) and parents:
                    parent, attempt = parents.pop()
                    head |= {"parent_trajectory_id": parent, "attempt": attempt + 1}
                out.append(self._rollout(task, f"{name}-{len(out)}", **head))
        return out

    def rollout_batches(self) -> tuple[list[Trajectory], list[list[Trajectory]]]:
        """The warm-up batch and the measured batches, each on tasks of its own."""
        groups = -(-self.shape.batch // self.shape.group)
        warm = self.rollout_batch("rw", self.shape.warm, 0)
        first = -(-self.shape.warm // self.shape.group)
        batches = [
            self.rollout_batch(f"rb{b}", self.shape.batch, first + b * groups) for b in range(self.shape.batches)
        ]
        return warm, batches
