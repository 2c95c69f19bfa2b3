"""/v1/namespaces."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.deps import PrincipalDep, ServicesDep
from service.namespaces.schemas import NamespaceCreate, NamespacePage, NamespaceRead
from service.params import Ns
from service.responses import created_or_replayed, replay_response

router = APIRouter(prefix="/v1/namespaces", tags=["namespaces"])


@router.post(
    "",
    status_code=201,
    response_model=NamespaceRead,
    operation_id="create_namespace",
    responses=replay_response(NamespaceRead),
)
def create_namespace(
    body: NamespaceCreate, principal: PrincipalDep, services: ServicesDep, response: Response
) -> NamespaceRead:
    """Create a namespace (admin). Repeating an identical request answers 200."""
    return created_or_replayed(services.namespaces.create(principal, body), response)


@router.get("", response_model=NamespacePage, operation_id="list_namespaces")
def list_namespaces(principal: PrincipalDep, services: ServicesDep) -> NamespacePage:
    """The namespaces this key may touch."""
    return NamespacePage(items=services.namespaces.list(principal), next_cursor=None)


@router.get("/{ns}", response_model=NamespaceRead, operation_id="get_namespace")
def get_namespace(ns: Ns, principal: PrincipalDep, services: ServicesDep) -> NamespaceRead:
    """One namespace: its settings and whether it is frozen for evaluation."""
    return services.namespaces.get(principal, ns)
