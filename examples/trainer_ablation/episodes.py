"""Rollouts of the doors family through Reflexa's contexts: at every step the
policy's prompt is the context the server renders for that step (the plain one,
or with the memory block for the memory-at-inference condition), asked for every
active episode in one request with the episodes inline (not stored yet).

A rollout may start from a replayed prefix (prefix replay): those steps are taken
as the stored success took them and are not the policy's own (mask 0)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from reflexa import Client

from examples.common.tiny_lm import ActionPolicy
from examples.trainer_ablation.doors import Episode, Family, Task

PLACEHOLDER = "?"  # the current step's action, not chosen yet (the plain context never shows it)
MEMORY_PROMPT = {"kind": "memory", "k": 3, "max_chars": 900}


@dataclass
class Step:
    observation: str
    action: str
    result: str
    reward: float
    context: list[int]  # the prompt's token ids ([] for a replayed step)
    own: bool  # sampled by the policy (False: replayed from a prefix)


@dataclass
class Rollout:
    id: str
    group_id: str
    task: Task
    env: Episode
    steps: list[Step] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return self.env.reward

    def inline(self, observation: str) -> dict[str, Any]:
        """The episode so far, with the current observation as its last step."""
        steps = [{"state": {"observation": s.observation}, "action": s.action, "result": s.result} for s in self.steps]
        steps.append({"state": {"observation": observation}, "action": PLACEHOLDER})
        return {"id": self.id, "task": self.task.text, "group_id": self.group_id, "steps": steps}

    def trajectory(self, policy_version: str) -> dict[str, Any]:
        steps = [
            {
                "index": i,
                "state": {"observation": s.observation},
                "action": s.action,
                "result": s.result,
                "reward": s.reward,
                "done": i == len(self.steps) - 1 and self.env.done,
                "metadata": None if s.own else {"replayed": True},
            }
            for i, s in enumerate(self.steps)
        ]
        return {
            "id": self.id,
            "task": self.task.text,
            "environment": "doors",
            "agent": "trainer-ablation",
            "policy_version": policy_version,
            "group_id": self.group_id,
            "steps": steps,
            "outcome": {"success": self.env.success, "reward": self.reward},
        }


@dataclass
class Timer:
    """Seconds spent in Reflexa's calls."""

    seconds: float = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._start


def replay(rollout: Rollout, prefix: Sequence[Any]) -> None:
    """Take a stored success's first steps (their actions) as that attempt took them."""
    for stored in prefix:
        if rollout.env.done:
            return
        observation = rollout.env.observation()
        result, reward = rollout.env.step(str(stored.action))
        rollout.steps.append(Step(observation, str(stored.action), result, reward, [], own=False))


def play(
    client: Client,
    namespace: str,
    policy: ActionPolicy,
    rollouts: Sequence[Rollout],
    *,
    memory: bool,
    snapshot: str | None,
    generator: torch.Generator | None,
    timer: Timer,
) -> None:
    """Step every rollout to its end: sampled (a generator) or greedy (None)."""
    teachers = [MEMORY_PROMPT] if memory else []
    while active := [r for r in rollouts if not r.env.done]:
        observations = [r.env.observation() for r in active]
        with timer:
            answer = client.distill_contexts(
                namespace,
                [r.inline(o) for r, o in zip(active, observations, strict=True)],
                teachers,
                snapshot=snapshot,
                leakage={"allow_same_task": True},
                include=["text"],
                steps=sorted({len(r.steps) for r in active}),
            )
        prompts = []
        for r, contexts in zip(active, answer.trajectories, strict=True):
            (here,) = [c for c in contexts.steps if c.index == len(r.steps)]
            text = here.teachers["memory"].text if memory else here.plain.text
            prompts.append(policy.context_ids(text or ""))
        chosen = policy.sample(prompts, generator) if generator is not None else policy.greedy(prompts)
        for r, observation, prompt, a in zip(active, observations, prompts, chosen, strict=True):
            door = policy.actions[a]
            result, reward = r.env.step(door)
            r.steps.append(Step(observation, door, result, reward, prompt, own=True))


def new_rollouts(family: Family, tasks: Sequence[Task], per_task: int, tag: str) -> list[Rollout]:
    return [
        Rollout(f"{tag}-{t.id}-r{i}", f"{tag}-{t.id}", t, Episode(family, t)) for t in tasks for i in range(per_task)
    ]
