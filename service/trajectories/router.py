"""/v1/namespaces/{ns}/trajectories: thin HTTP edge over TrajectoryService."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from domain.errors import InvalidInput
from domain.hashing import task_hash
from domain.schemas import ErrorResponse
from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.params import Ns, TrajectoryId
from service.responses import REPLAYED, created_or_replayed
from service.trajectories.schemas import (
    BatchWritten,
    OutcomeCreate,
    StepsAppend,
    StepsAppended,
    TrajectoryBatchCreate,
    TrajectoryCreate,
    TrajectoryDeleted,
    TrajectoryPage,
    TrajectoryRead,
    TrajectoryWritten,
)
from store.trajectory_reader import TrajectoryFilter

router = APIRouter(prefix="/v1/namespaces/{ns}/trajectories", tags=["trajectories"])

TOKEN_HEADER = "X-Reflexa-Consistency-Token"

# The write routes are `async def` around one hop to the thread pool for the service
# call: a sync route takes a second hop to validate its answer, ~0.1-0.3 ms of a
# 50-step append (bench/ingest profile), the same as retrieve's route.

WRITE_RESPONSES = {
    200: {"description": REPLAYED},
    409: {"model": ErrorResponse, "description": "the id exists with a different body, or the trajectory is closed"},
    422: {"model": ErrorResponse, "description": "invalid input; the error names the field and the rule"},
}


@router.post(
    "",
    status_code=201,
    response_model=TrajectoryWritten,
    operation_id="create_trajectory",
    responses=WRITE_RESPONSES,
)
async def create_trajectory(
    ns: Ns, body: TrajectoryCreate, principal: PrincipalDep, services: ServicesDep, response: Response
) -> TrajectoryWritten:
    """Store one trajectory (steps and outcome optional), durably, before answering."""
    stored = await run_in_threadpool(services.trajectories.create, principal, ns, body)
    written = created_or_replayed(stored, response)
    response.headers[TOKEN_HEADER] = written.consistency_token
    return written


@router.post(
    "/batch",
    status_code=201,
    response_model=BatchWritten,
    operation_id="create_trajectories_batch",
    responses=WRITE_RESPONSES,
)
async def create_trajectories_batch(
    ns: Ns, body: TrajectoryBatchCreate, principal: PrincipalDep, services: ServicesDep, response: Response
) -> BatchWritten:
    """Store many trajectories (e.g. a rollout group) atomically: all are stored, or
    none and the error names the item (`trajectories[3].steps[2].state.observation`).
    Items identical to stored ones count as replays (`created: false`)."""
    stored = await run_in_threadpool(services.trajectories.create_batch, principal, ns, body.trajectories)
    written = created_or_replayed(stored, response)
    response.headers[TOKEN_HEADER] = written.consistency_token
    return written


@router.get("", response_model=TrajectoryPage, operation_id="list_trajectories")
def list_trajectories(
    ns: Ns,
    principal: PrincipalDep,
    services: ServicesDep,
    limit: PageLimit,
    environment: str | None = None,
    agent: str | None = None,
    task: str | None = Query(None, description="exact task text"),
    policy_version: str | None = None,
    group_id: str | None = None,
    status: Literal["open", "closed"] | None = None,
    success: bool | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    include_steps: bool = False,
    cursor: str | None = None,
) -> TrajectoryPage:
    """Newest first, with cursor pagination."""
    for name, value in (("created_after", created_after), ("created_before", created_before)):
        if value is not None and value.tzinfo is None:
            raise InvalidInput(f"{name} needs a timezone (e.g. 2026-01-01T00:00:00Z)", field=name, rule="aware")
    filters = TrajectoryFilter(
        environment=environment,
        agent=agent,
        task_hash=task_hash(task) if task is not None else None,
        policy_version=policy_version,
        group_id=group_id,
        status=status,
        success=success,
        created_after=created_after,
        created_before=created_before,
    )
    return services.trajectories.list(principal, ns, filters, cursor=cursor, limit=limit, include_steps=include_steps)


@router.get("/{id}", response_model=TrajectoryRead, operation_id="get_trajectory")
def get_trajectory(ns: Ns, id: TrajectoryId, principal: PrincipalDep, services: ServicesDep) -> TrajectoryRead:
    """One trajectory with all its steps."""
    return services.trajectories.get(principal, ns, id)


@router.post("/{id}/steps", response_model=StepsAppended, operation_id="append_steps", responses=WRITE_RESPONSES)
async def append_steps(
    ns: Ns,
    id: TrajectoryId,
    body: StepsAppend,
    principal: PrincipalDep,
    services: ServicesDep,
    response: Response,
) -> StepsAppended:
    """Append steps to an open trajectory. Give each step its `index` to make a
    retried append a harmless replay."""
    appended = await run_in_threadpool(services.trajectories.append_steps, principal, ns, id, body.steps)
    response.headers[TOKEN_HEADER] = appended.consistency_token
    return appended


@router.post(
    "/{id}/outcome",
    response_model=TrajectoryWritten,
    operation_id="close_trajectory",
    responses=WRITE_RESPONSES,
)
async def close_trajectory(
    ns: Ns,
    id: TrajectoryId,
    body: OutcomeCreate,
    principal: PrincipalDep,
    services: ServicesDep,
    response: Response,
    wait_ms: int = Query(
        0, ge=0, le=60_000, description="wait up to this long until the episode's exemplars are searchable"
    ),
) -> TrajectoryWritten:
    """Record the outcome: closes the trajectory and queues its reflection. With
    `wait_ms`, answers only once its exemplars are searchable (504 after `wait_ms`;
    the outcome is stored either way)."""
    written = await run_in_threadpool(services.trajectories.close, principal, ns, id, body)
    response.headers[TOKEN_HEADER] = written.consistency_token
    if wait_ms:
        await run_in_threadpool(services.retrieval.wait_searchable, ns, written.consistency_token, wait_ms)
    return written


@router.delete("/{id}", response_model=TrajectoryDeleted, operation_id="delete_trajectory")
def delete_trajectory(ns: Ns, id: TrajectoryId, principal: PrincipalDep, services: ServicesDep) -> TrajectoryDeleted:
    """Delete a trajectory, its steps, and every reflection derived only from it."""
    return services.trajectories.delete(principal, ns, id)
