"""Prefix-replay schemas: POST /v1/namespaces/{ns}/distill/prefixes.

The core names (snapshot, tasks | trajectories, step, schedule{kind: step_decay,
start_fraction, half_life_steps}) are fixed by the trainer surface in DESIGN.md;
the rest are additions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from domain.schemas import ClientId, RequestModel, ResponseModel
from service.trajectories.schemas import StepFields

DEFAULT_PREFIXES = 1
MAX_PREFIXES = 16


class StepDecay(RequestModel):
    """fraction(step) = max(min_fraction, start_fraction · 2^(−step / half_life_steps))."""

    kind: Literal["step_decay"]
    start_fraction: float = Field(gt=0, le=1, description="the share of steps replayed at trainer step 0")
    half_life_steps: float = Field(gt=0, description="trainer steps after which the share has halved")
    min_fraction: float = Field(0.0, ge=0, le=1, description="the share never falls below this")

    @model_validator(mode="after")
    def _floor_below_start(self) -> StepDecay:
        if self.min_fraction > self.start_fraction:
            raise ValueError("min_fraction must not exceed start_fraction")
        return self


class PrefixTrajectory(RequestModel):
    """The rollout a prefix is wanted for: a stored trajectory by `{"id"}` alone, or
    the task (with the id and rollout group the trainer will give it, for the guards)."""

    id: ClientId | None = None
    task: str | None = Field(None, min_length=1, description="inline: the task; a stored trajectory gives only id")
    group_id: ClientId | None = Field(None, description="inline: its rollout group (stored ones of it are excluded)")

    @model_validator(mode="after")
    def _stored_or_inline(self) -> PrefixTrajectory:
        if self.task is None:
            if self.id is None:
                raise ValueError("give the id of a stored trajectory, or the task of an inline one")
            if self.group_id is not None:
                raise ValueError("a stored trajectory is named by id alone; its group is read from the store")
        return self

    @property
    def stored(self) -> bool:
        return self.task is None


class PrefixLeakage(RequestModel):
    """The guards of contexts that apply to prefixes (a prefix is of the same task by
    design): never the trajectory itself or a member of its rollout group."""

    allow_same_trajectory: bool = False
    allow_same_group: bool = False


class PrefixesRequest(RequestModel):
    snapshot: ClientId | None = Field(None, description="read trajectories as pinned by this snapshot")
    tasks: list[str] | None = Field(None, min_length=1, description="prefixes per task (no guard applies)")
    trajectories: list[PrefixTrajectory] | None = Field(
        None, min_length=1, description="prefixes for each of these rollouts' tasks, with the leakage guards"
    )
    step: int = Field(ge=0, description="the trainer's step, which the schedule decays with")
    schedule: StepDecay
    k: int = Field(DEFAULT_PREFIXES, ge=1, le=MAX_PREFIXES, description="prefixes per entry, best first")
    leakage: PrefixLeakage = Field(default_factory=PrefixLeakage)

    @model_validator(mode="after")
    def _one_source(self) -> PrefixesRequest:
        if (self.tasks is None) == (self.trajectories is None):
            raise ValueError("give exactly one of tasks and trajectories")
        if self.tasks is not None and any(not t for t in self.tasks):
            raise ValueError("tasks must not hold an empty string")
        return self


class PrefixStep(StepFields):
    pass


class Prefix(ResponseModel):
    trajectory_id: str = Field(description="the stored successful trajectory replayed")
    reward: float | None
    total_steps: int
    prefix_steps: int = Field(description="min(total_steps − 1, ⌊fraction · total_steps⌋)")
    steps: list[PrefixStep] = Field(description="its first prefix_steps steps, to replay before the policy acts")


class EntryPrefixes(ResponseModel):
    task: str
    trajectory_id: str | None = Field(description="the rollout asked for (trajectories); null for tasks")
    prefixes: list[Prefix]
    candidates: int = Field(description="successful trajectories of the task read (the newest, at most 256)")
    excluded: int = Field(description="of them, withheld by the leakage guards")


class PrefixesResponse(ResponseModel):
    snapshot: str | None
    step: int
    fraction: float = Field(description="the schedule's share at this step")
    entries: list[EntryPrefixes] = Field(description="one per task or trajectory asked for, in request order")
