"""/v1/namespaces/{ns}/snapshots and /v1/namespaces/{ns}/freeze (trainers, operators)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.params import Ns
from service.responses import created_or_replayed, replay_response
from service.snapshots.schemas import FreezeRead, SnapshotCreate, SnapshotPage, SnapshotRead

router = APIRouter(prefix="/v1/namespaces/{ns}", tags=["snapshots"])


@router.post(
    "/snapshots",
    response_model=SnapshotRead,
    status_code=201,
    operation_id="create_snapshot",
    responses=replay_response(SnapshotRead),
)
def create_snapshot(
    ns: Ns, body: SnapshotCreate, principal: PrincipalDep, services: ServicesDep, response: Response
) -> SnapshotRead:
    """Pin memory now: every trainer read and retrieve given `snapshot` answers the
    same from then on. A retry with the same id and body is a replay (200)."""
    return created_or_replayed(services.snapshots.create(principal, ns, body), response)


@router.get("/snapshots", response_model=SnapshotPage, operation_id="list_snapshots")
def list_snapshots(
    ns: Ns, principal: PrincipalDep, services: ServicesDep, limit: PageLimit, cursor: str | None = None
) -> SnapshotPage:
    """Newest first."""
    return services.snapshots.list(principal, ns, cursor=cursor, limit=limit)


@router.get("/snapshots/{id}", response_model=SnapshotRead, operation_id="get_snapshot")
def get_snapshot(ns: Ns, id: str, principal: PrincipalDep, services: ServicesDep) -> SnapshotRead:
    return services.snapshots.get(principal, ns, id)


@router.delete("/snapshots/{id}", status_code=204, operation_id="delete_snapshot")
def delete_snapshot(ns: Ns, id: str, principal: PrincipalDep, services: ServicesDep) -> Response:
    services.snapshots.delete(principal, ns, id)
    return Response(status_code=204)


@router.get("/freeze", response_model=FreezeRead, operation_id="get_freeze")
def get_freeze(ns: Ns, principal: PrincipalDep, services: ServicesDep) -> FreezeRead:
    return services.snapshots.freeze_state(principal, ns)


@router.put("/freeze", response_model=FreezeRead, operation_id="freeze_namespace")
def freeze(ns: Ns, principal: PrincipalDep, services: ServicesDep) -> FreezeRead:
    """Freeze memory for evaluation: ingest is still accepted, but no reflection job
    runs, no reflection is edited and no outcome changes utility until thawed."""
    return services.snapshots.set_frozen(principal, ns, True)


@router.delete("/freeze", response_model=FreezeRead, operation_id="thaw_namespace")
def thaw(ns: Ns, principal: PrincipalDep, services: ServicesDep) -> FreezeRead:
    """Thaw: the reflection jobs queued meanwhile run."""
    return services.snapshots.set_frozen(principal, ns, False)
