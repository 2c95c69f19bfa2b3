"""One run of the ablation: a condition, a seed, the warm-up checkpoint, the update
budget. Per update, for 8 training tasks × 8 rollouts (the same tasks for every
condition of a seed):

1. (prefix) ask Reflexa for a stored success's prefix of each task and replay it
   in the first rollouts of the task;
2. roll out, each step prompted with the context Reflexa renders (under the
   snapshot the previous update pinned);
3. store the groups, wait until they are searchable, pin a snapshot;
4. (teachers) the teacher contexts of every stored step, scored by the policy
   itself in process (self-distillation: the teacher is the same policy reading
   privileged context);
5. advantages from Reflexa (the condition's method and parameters);
6. one REINFORCE step: loss = −mean over the policy's own tokens of A_t log π(a_t | prompt_t).

Greedy evaluation on every training task every `eval_every` updates (and before
the first), and on the never-trained tasks after the last; evaluation episodes are
not stored.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from reflexa import Client

from examples.common.searchable import wait_searchable
from examples.common.tiny_lm import ActionPolicy
from examples.trainer_ablation.conditions import Condition
from examples.trainer_ablation.doors import Family, Task
from examples.trainer_ablation.episodes import Rollout, Timer, new_rollouts, play, replay

LEARNING_RATE = 3e-4


@dataclass(frozen=True)
class Size:
    updates: int = 60
    tasks_per_update: int = 8
    rollouts_per_task: int = 8
    eval_every: int = 5


@dataclass
class RunResult:
    condition: str
    seed: int
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (updates done, greedy training success)
    held_out: float | None = None
    updates: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "condition": self.condition,
            "seed": self.seed,
            "evaluations": [list(e) for e in self.evaluations],
            "held_out": self.held_out,
            "updates": self.updates,
        }


@dataclass
class Run:
    client: Client
    namespace: str
    condition: Condition
    seed: int
    family: Family
    policy: ActionPolicy
    size: Size
    timer: Timer = field(default_factory=Timer)
    snapshot: str | None = None
    fade_share: float | None = None  # the last update's mean applied budget share (fade)

    def __post_init__(self) -> None:
        self.optimizer = torch.optim.Adam(self.policy.model.parameters(), lr=LEARNING_RATE)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        result = RunResult(self.condition.name, self.seed)
        result.evaluations.append((0, self.evaluate(self.family.train)))
        for u in range(self.size.updates):
            result.updates.append(self.update(u))
            if (u + 1) % self.size.eval_every == 0 or u + 1 == self.size.updates:
                result.evaluations.append((u + 1, self.evaluate(self.family.train)))
        result.held_out = self.evaluate(self.family.held_out)
        return result

    def tasks_of(self, update: int) -> list[Task]:
        """The update's training tasks: a function of the seed and the update alone."""
        return random.Random(f"tasks/{self.seed}/{update}").sample(list(self.family.train), self.size.tasks_per_update)

    def evaluate(self, tasks: tuple[Task, ...]) -> float:
        rollouts = new_rollouts(self.family, tasks, 1, f"eval-{time.monotonic_ns()}")
        play(
            self.client,
            self.namespace,
            self.policy,
            rollouts,
            memory=self.condition.memory_prompt,
            snapshot=self.snapshot,
            generator=None,
            timer=Timer(),
        )
        return sum(r.env.success for r in rollouts) / len(rollouts)

    # -- one update -------------------------------------------------------------------------------

    def update(self, u: int) -> dict[str, Any]:
        started, self.timer = time.perf_counter(), Timer()
        c = self.condition
        tasks = self.tasks_of(u)
        rollouts = new_rollouts(self.family, tasks, self.size.rollouts_per_task, f"s{self.seed}-u{u}")
        replayed = self._replay(u, tasks, rollouts) if c.replayed_per_task else 0
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + u)
        play(
            self.client,
            self.namespace,
            self.policy,
            rollouts,
            memory=c.memory_prompt,
            snapshot=self.snapshot,
            generator=generator,
            timer=self.timer,
        )
        previous = self.snapshot
        with self.timer:
            self.client.create_trajectories(self.namespace, [r.trajectory(f"u{u}") for r in rollouts])
            wait_searchable(self.client, self.namespace, rollouts[0].steps[0].observation)  # before the snapshot
            self.snapshot = self.client.create_snapshot(self.namespace, f"s{self.seed}-u{u}").id
            if previous is not None:
                self.client.delete_snapshot(self.namespace, previous)
        teacher = self._teacher_logprobs(rollouts, f"u{u}") if c.teachers else {}
        own = [[i for i, s in enumerate(r.steps) if s.own] for r in rollouts]
        contexts = [r.steps[i].context for r, idx in zip(rollouts, own, strict=True) for i in idx]
        logprobs = self.policy.action_logprobs(contexts)
        chosen = torch.tensor(
            [self.policy.actions.index(r.steps[i].action) for r, idx in zip(rollouts, own, strict=True) for i in idx]
        )
        sampled = logprobs[torch.arange(len(chosen)), chosen]
        student = self._per_rollout(rollouts, own, sampled.detach().tolist())
        groups: dict[str, list[dict[str, Any]]] = {}
        for r, lp in zip(rollouts, student, strict=True):
            item: dict[str, Any] = {
                "id": r.id,
                "reward": r.reward,
                "token_steps": list(range(len(r.steps))),
                "mask": [int(s.own) for s in r.steps],
            }
            if c.teachers:
                item["logprobs"] = {"student": lp, "teacher": {name: v[r.id] for name, v in teacher.items()}}
            groups.setdefault(r.group_id, []).append(item)
        with self.timer:
            answer = self.client.distill_advantages(
                c.method, [{"group_id": g, "trajectories": t} for g, t in groups.items()], params=c.params or None
            )
        advantages = torch.tensor(
            [
                a
                for r, result, idx in zip(rollouts, answer.trajectories, own, strict=True)
                for i, a in enumerate(result.advantages)
                if i in idx
            ]
        )
        loss = -(advantages * sampled).sum() / max(len(advantages), 1)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        batch = answer.diagnostics.batch
        return {
            "update": u,
            "reward": sum(r.reward for r in rollouts) / len(rollouts),
            "success": sum(r.env.success for r in rollouts) / len(rollouts),
            "replayed_steps": replayed,
            "order_consistency": batch.order_consistency,
            "length_correlation": batch.length_correlation,
            "clipped_tokens_share": batch.clipped_tokens_share,
            "fade_share": self.fade_share,
            "seconds": time.perf_counter() - started,
            "reflexa_seconds": self.timer.seconds,
        }

    # -- pieces ---------------------------------------------------------------------------------------

    def _replay(self, u: int, tasks: list[Task], rollouts: list[Rollout]) -> int:
        """Replay a prefix in the first `replayed_per_task` rollouts of each task."""
        c = self.condition
        assert c.schedule is not None
        with self.timer:
            answer = self.client.distill_prefixes(
                self.namespace,
                tasks=[t.text for t in tasks],
                step=u,
                schedule=c.schedule,
                k=1,
                snapshot=self.snapshot,
            )
        replayed = 0
        for task, entry in zip(tasks, answer.entries, strict=True):
            if not entry.prefixes:
                continue
            steps = entry.prefixes[0].steps
            for r in [r for r in rollouts if r.task == task][: c.replayed_per_task]:
                replay(r, steps)
                replayed += len(r.steps)
        return replayed

    def _teacher_logprobs(self, rollouts: list[Rollout], version: str) -> dict[str, dict[str, list[float]]]:
        """teacher name -> rollout id -> per step the policy's log-prob of the action
        taken, reading that teacher context (0 on replayed steps, which are masked).
        A faded scaffold fades by the success of this update's own rollouts."""
        c = self.condition
        with self.timer:
            answer = self.client.distill_contexts(
                self.namespace,
                [r.id for r in rollouts],
                list(c.teachers),
                snapshot=self.snapshot,
                leakage={"allow_same_task": True},
                include=["text"],
                fade=None if c.fade is None else {**c.fade, "policy_version": version},
            )
        names = list(answer.trajectories[0].steps[0].teachers)
        contexts = [ctx for t in answer.trajectories for step in t.steps for ctx in step.teachers.values()]
        shares = [ctx.budget.share for ctx in contexts if ctx.budget is not None]
        self.fade_share = sum(shares) / len(shares) if shares else None
        prompts, where = [], []
        for r, contexts in zip(rollouts, answer.trajectories, strict=True):
            for step, ctx in zip(r.steps, contexts.steps, strict=True):
                if not step.own:
                    continue
                for name in names:
                    prompts.append(self.policy.context_ids(ctx.teachers[name].text or ""))
                    where.append((name, r.id, ctx.index, self.policy.actions.index(step.action)))
        out: dict[str, dict[str, list[float]]] = {n: {r.id: [0.0] * len(r.steps) for r in rollouts} for n in names}
        if prompts:
            with torch.no_grad():
                scored = self.policy.action_logprobs(prompts)
            for (name, rid, index, action), row in zip(where, scored, strict=True):
                out[name][rid][index] = min(0.0, float(row[action]))
        return out

    @staticmethod
    def _per_rollout(rollouts: list[Rollout], own: list[list[int]], values: list[float]) -> list[list[float]]:
        out, k = [], 0
        for r, idx in zip(rollouts, own, strict=True):
            row = [0.0] * len(r.steps)
            for i in idx:
                row[i] = min(0.0, values[k])
                k += 1
            out.append(row)
        return out
