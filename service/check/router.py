"""POST /v1/namespaces/{ns}/check: the pre-action check."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from service.check.schemas import CheckRequest, CheckResponse
from service.deps import PrincipalDep, ServicesDep
from service.params import Ns
from service.responses import CONSISTENCY_TIMEOUT

router = APIRouter(prefix="/v1/namespaces/{ns}", tags=["check"])


@router.post(
    "/check",
    response_model=CheckResponse,
    operation_id="check_action",
    responses=CONSISTENCY_TIMEOUT,
)
async def check_action(ns: Ns, body: CheckRequest, principal: PrincipalDep, services: ServicesDep) -> CheckResponse:
    """Before acting: how often this action failed in states like this one (a rate with
    its 95% Wilson interval), the steps behind it, the other actions taken there (best
    first), and the active heuristics that name it. Logged as a retrieval of exemplars."""
    return await run_in_threadpool(services.check.check, principal, ns, body)
