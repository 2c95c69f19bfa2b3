"""POST /v1/distill/advantages (trainers; not namespaced: nothing is read or stored)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PrincipalDep, ServicesDep
from service.distill.advantages.schemas import AdvantagesRequest, AdvantagesResponse

router = APIRouter(prefix="/v1/distill", tags=["distill"])


@router.post("/advantages", response_model=AdvantagesResponse, operation_id="distill_advantages")
def distill_advantages(body: AdvantagesRequest, principal: PrincipalDep, services: ServicesDep) -> AdvantagesResponse:
    """Per trajectory of a batch of rollout groups: per-token advantages (aligned with
    the tokens sent, 0 on masked ones), per-token rewards and per-step signals, and
    diagnostics per batch and per group. Methods: grpo, rloo, token_signal (SEED /
    on-policy distillation), direct_opd, step_shaping (StepOPSD), horizon_agreement
    (TurnSight); on any of them a reference-KL penalty (params.kl) and off-policy
    weights (params.is: TIS / MIS); formulas, parameters and defaults in
    docs/distillation.md.
    Deterministic: the same body gives the same answer, whatever the order of groups
    and trajectories."""
    return services.advantages.compute(principal, body)
