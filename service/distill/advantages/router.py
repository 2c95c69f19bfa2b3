"""POST /v1/distill/advantages (trainers; not namespaced: nothing is read or stored).

Two routes share the path, on purpose: the first (hidden from the OpenAPI document)
serves every request and reads its body itself (JSON or the binary layout,
service.distill.advantages.body), because FastAPI's declared-body path parses JSON
with the standard library and validates every number in Python, which was most of
this route's time; the second is never reached and only documents the route with
the request model, as before. Starlette serves the first route that matches."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from service.deps import PrincipalDep, ServicesDep
from service.distill.advantages.binary import MEDIA_TYPE
from service.distill.advantages.body import decode, encode
from service.distill.advantages.schemas import AdvantagesRequest, AdvantagesResponse
from service.limits.storable import checks_its_own_body

router = APIRouter(prefix="/v1/distill", tags=["distill"])


async def raw_body(request: Request) -> bytes:
    return await request.body()


_BINARY = {"schema": {"type": "string", "format": "binary", "description": "docs/trainers.md, 'The binary body'"}}


@router.post("/advantages", include_in_schema=False)
@checks_its_own_body
def serve_advantages(
    request: Request, raw: Annotated[bytes, Depends(raw_body)], principal: PrincipalDep, services: ServicesDep
) -> Response:
    body = decode(raw, request.headers.get("content-type"), services.settings.limits)
    return encode(services.advantages.compute(principal, body), request.headers.get("accept"))


@router.post(
    "/advantages",
    response_model=AdvantagesResponse,
    operation_id="distill_advantages",
    openapi_extra={
        "requestBody": {"content": {MEDIA_TYPE: _BINARY}},
        "responses": {"200": {"content": {MEDIA_TYPE: _BINARY}}},
    },
)
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
    raise AssertionError("served by serve_advantages, the route above")  # pragma: no cover
