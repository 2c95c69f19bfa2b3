"""/v1/namespaces/{ns}/tasks: curriculum statistics (trainers)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.params import Ns
from service.tasks.repository import TaskFilters
from service.tasks.schemas import SortOrder, TaskGroupBy, TaskSort, TaskStatsPage

router = APIRouter(prefix="/v1/namespaces/{ns}/tasks", tags=["tasks"])


@router.get("", response_model=TaskStatsPage, operation_id="list_tasks")
def list_tasks(
    ns: Ns,
    principal: PrincipalDep,
    services: ServicesDep,
    limit: PageLimit,
    group_by: TaskGroupBy = Query("task", description="`task`, or `task,policy_version` for one row per pair"),
    sort: TaskSort = "learning_signal",
    order: SortOrder = "desc",
    environment: str | None = None,
    agent: str | None = None,
    policy_version: str | None = None,
    min_attempts: int | None = Query(None, ge=0, description="only tasks with at least this many attempts"),
    snapshot: str | None = Query(None, description="statistics as of this snapshot (deterministic under it)"),
    cursor: str | None = None,
) -> TaskStatsPage:
    """Per task: attempts, success rate, reward mean and variance, rollout groups and
    the learning signal a group-relative learner gets from them. Sorted (nulls
    last in either order) and cursor-paged."""
    filters = TaskFilters(
        environment=environment, agent=agent, policy_version=policy_version, min_attempts=min_attempts
    )
    return services.tasks.list(
        principal,
        ns,
        group_by=group_by,
        sort=sort,
        order=order,
        filters=filters,
        snapshot=snapshot,
        cursor=cursor,
        limit=limit,
    )
