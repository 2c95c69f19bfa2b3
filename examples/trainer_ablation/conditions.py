"""The seven conditions of the ablation (docs/trainers.md, "Does it help?"): what
each adds to the outcome-only update, as the teachers it reads after the rollouts,
the advantage method and parameters it asks Reflexa for, and how its rollouts
start and prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from examples.trainer_ablation.episodes import MEMORY_PROMPT


@dataclass(frozen=True)
class Condition:
    name: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    teachers: tuple[dict[str, Any], ...] = ()  # teacher contexts scored by the policy after the rollouts
    memory_prompt: bool = False  # the policy's own prompt carries retrieved memory
    replayed_per_task: int = 0  # rollouts of each task that start from a stored success's prefix
    schedule: dict[str, Any] | None = None
    fade: dict[str, Any] | None = None  # contexts' fade, its policy_version the update's own


HINDSIGHT_1 = {"kind": "hindsight", "horizon": 1}
HINDSIGHT_2 = {"kind": "hindsight", "horizon": 2}
CARD = {"kind": "evidence_card", "max_chars": 900}

CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition("grpo", "grpo"),
        Condition("seed", "token_signal", {"teacher": "memory", "beta": 1.0}, teachers=(MEMORY_PROMPT,)),
        Condition(
            "stepopsd", "step_shaping", {"teacher": "hindsight@1", "lambda": 0.5, "alpha": 1.0}, teachers=(HINDSIGHT_1,)
        ),
        Condition(
            "turnsight",
            "horizon_agreement",
            {"horizons": ["hindsight@1", "hindsight@2"], "beta": 0.5},
            teachers=(HINDSIGHT_1, HINDSIGHT_2),
        ),
        Condition(
            "prefix",
            "grpo",
            replayed_per_task=2,
            schedule={"kind": "step_decay", "start_fraction": 0.67, "half_life_steps": 15},
        ),
        Condition(
            "fade",
            "token_signal",
            {"teacher": "evidence_card", "beta": 1.0},
            teachers=(CARD,),
            fade={"by": "task_success", "min_attempts": 4},
        ),
        Condition("memory_inference", "grpo", memory_prompt=True),
    )
}
