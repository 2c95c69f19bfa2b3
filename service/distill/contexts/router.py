"""POST /v1/namespaces/{ns}/distill/contexts (trainers)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PrincipalDep, ServicesDep
from service.distill.contexts.schemas import ContextsRequest, ContextsResponse
from service.params import Ns

router = APIRouter(prefix="/v1/namespaces/{ns}/distill", tags=["distill"])


@router.post("/contexts", response_model=ContextsResponse, operation_id="distill_contexts")
def distill_contexts(ns: Ns, body: ContextsRequest, principal: PrincipalDep, services: ServicesDep) -> ContextsResponse:
    """Per step of each trajectory (stored, by id, or inline): the plain context (the
    task and the history the agent saw) and each teacher context (the same with a
    privileged block in the system message: memory, hindsight@h, evidence_card,
    reflection, attempt_summary), as text and chat messages, with the items used,
    their sizes and the leakage guards applied. Deterministic under `snapshot`."""
    return services.distill.contexts(principal, ns, body)
