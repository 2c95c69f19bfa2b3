"""POST /v1/namespaces/{ns}/distill/prefixes (trainers)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PrincipalDep, ServicesDep
from service.distill.prefixes.schemas import PrefixesRequest, PrefixesResponse
from service.params import Ns

router = APIRouter(prefix="/v1/namespaces/{ns}/distill", tags=["distill"])


@router.post("/prefixes", response_model=PrefixesResponse, operation_id="distill_prefixes")
def distill_prefixes(ns: Ns, body: PrefixesRequest, principal: PrincipalDep, services: ServicesDep) -> PrefixesResponse:
    """Prefix replay (ReOPD): per task (or per rollout, with the leakage guards), the
    first steps of the task's best stored successful trajectories, as many as the
    step-decay schedule gives at the trainer's `step`:
    fraction = max(min_fraction, start_fraction · 2^(−step / half_life_steps)),
    prefix_steps = min(total_steps − 1, ⌊fraction · total_steps⌋).
    Deterministic under `snapshot`."""
    return services.prefixes.prefixes(principal, ns, body)
