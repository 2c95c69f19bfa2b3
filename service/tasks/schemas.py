"""Curriculum statistics schemas (trainers)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from domain.schemas import Page, ResponseModel
from service.tasks.repository import TaskSort

__all__ = ["SortOrder", "TaskGroupBy", "TaskSort", "TaskStatsPage", "TaskStatsRead"]

TaskGroupBy = Literal["task", "task,policy_version"]
SortOrder = Literal["desc", "asc"]


class TaskStatsRead(ResponseModel):
    task_hash: str
    task: str
    policy_version: str | None = Field(
        None, description="with group_by=task,policy_version; null with group_by=task (or for rollouts without one)"
    )
    attempts: int = Field(description="closed trajectories")
    open: int = Field(description="trajectories not closed yet (no attempt yet)")
    successes: int
    failures: int
    rewarded: int = Field(description="attempts with a reward: `reward`, else 1.0/0.0 from `success`")
    success_rate: float | None = Field(description="successes / attempts with a success value; null when none")
    reward_mean: float | None = Field(description="over rewarded attempts; null when none")
    reward_var: float | None = Field(description="population variance over rewarded attempts; null when none")
    groups: int = Field(description="distinct non-null group_id")
    mixed_groups: int = Field(description="groups with both a success and a failure")
    signal_groups: int = Field(description="groups with at least two rewarded members (what learning_signal averages)")
    learning_signal: float | None = Field(
        description="mean over groups with >= 2 rewarded members of the within-group reward variance "
        "(population); null when no such group. All-win and all-lose groups give 0: GRPO learns nothing there"
    )
    last_seen: datetime = Field(description="latest created_at or closed_at")


class TaskStatsPage(Page[TaskStatsRead]):
    snapshot: str | None = Field(None, description="the snapshot the statistics are as of; null: live")
