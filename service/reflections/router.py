"""/v1/namespaces/{ns}/reflections: browse and curate what was learned."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.reflections.schemas import ReflectionRead, ReflectionUpdate, ReflectionVersionRead
from service.retrieval.schemas import Kind, Status
from service.schemas import ID_PATTERN, NAMESPACE_PATTERN, Page
from store.reflections import ReflectionFilters

router = APIRouter(prefix="/v1/namespaces/{ns}/reflections", tags=["reflections"])

Ns = Annotated[str, Path(pattern=NAMESPACE_PATTERN, description="namespace name")]
ReflectionId = Annotated[str, Path(pattern=ID_PATTERN, description="reflection id")]


@router.get("", response_model=Page[ReflectionRead], operation_id="list_reflections")
def list_reflections(
    ns: Ns,
    principal: PrincipalDep,
    services: ServicesDep,
    limit: PageLimit,
    kind: Kind | None = None,
    status: Status | None = None,
    environment: str | None = None,
    reflector: str | None = None,
    cursor: str | None = None,
) -> Page[ReflectionRead]:
    """Newest first, each with its evidence summary and utility."""
    filters = ReflectionFilters(kind=kind, status=status, environment=environment, reflector=reflector)
    items, next_cursor = services.reflections.list(principal, ns, filters, cursor=cursor, limit=limit)
    return Page[ReflectionRead](items=items, next_cursor=next_cursor)


@router.get("/{id}", response_model=ReflectionRead, operation_id="get_reflection")
def get_reflection(ns: Ns, id: ReflectionId, principal: PrincipalDep, services: ServicesDep) -> ReflectionRead:
    """One reflection with all its evidence."""
    return services.reflections.get(principal, ns, id)


@router.patch("/{id}", response_model=ReflectionRead, operation_id="update_reflection")
def update_reflection(
    ns: Ns, id: ReflectionId, body: ReflectionUpdate, principal: PrincipalDep, services: ServicesDep
) -> ReflectionRead:
    """Edit (a new version; the old one stays in the history) and/or change status:
    candidate → active (approve), → retired (retire), retired → active (restore)."""
    return services.reflections.update(principal, ns, id, body)


@router.get("/{id}/history", response_model=list[ReflectionVersionRead], operation_id="reflection_history")
def reflection_history(
    ns: Ns, id: ReflectionId, principal: PrincipalDep, services: ServicesDep
) -> list[ReflectionVersionRead]:
    """Every version and status change: who, what, when, why."""
    return services.reflections.history(principal, ns, id)
