"""/v1/namespaces/{ns}/reflections: browse and curate what was learned."""

from __future__ import annotations

from fastapi import APIRouter

from domain.reflections import Kind, Status
from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.params import Ns, ReflectionId
from service.reflections.schemas import (
    ReflectionEffect,
    ReflectionPage,
    ReflectionRead,
    ReflectionUpdate,
    ReflectionVersionRead,
)
from store.reflections import ReflectionFilters

router = APIRouter(prefix="/v1/namespaces/{ns}/reflections", tags=["reflections"])


@router.get("", response_model=ReflectionPage, operation_id="list_reflections")
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
) -> ReflectionPage:
    """Newest first, each with its evidence summary and utility."""
    filters = ReflectionFilters(kind=kind, status=status, environment=environment, reflector=reflector)
    return services.reflections.list(principal, ns, filters, cursor=cursor, limit=limit)


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


@router.get("/{id}/effect", response_model=ReflectionEffect, operation_id="reflection_effect")
def reflection_effect(ns: Ns, id: ReflectionId, principal: PrincipalDep, services: ServicesDep) -> ReflectionEffect:
    """The item's causal effect on success: outcomes of the episodes it was randomly
    withheld from against those it was served to (`credit.holdout_rate`)."""
    return services.reflections.effect(principal, ns, id)
