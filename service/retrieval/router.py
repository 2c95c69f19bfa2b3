"""POST /v1/namespaces/{ns}/retrieve and …/retrievals/{rid}/outcome."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks
from starlette.concurrency import run_in_threadpool

from domain.schemas import ErrorResponse
from service.deps import PrincipalDep, ServicesDep
from service.params import Ns, RetrievalId
from service.retrieval.schemas import (
    RetrievalOutcomeCreate,
    RetrievalOutcomeRead,
    RetrieveBatchRequest,
    RetrieveBatchResponse,
    RetrieveRequest,
    RetrieveResponse,
)

router = APIRouter(prefix="/v1/namespaces/{ns}", tags=["retrieval"])


@router.post(
    "/retrieve",
    response_model=RetrieveResponse,
    operation_id="retrieve",
    responses={504: {"model": ErrorResponse, "description": "consistency_token not searchable within wait_timeout_ms"}},
)
async def retrieve(
    ns: Ns, body: RetrieveRequest, principal: PrincipalDep, services: ServicesDep, after: BackgroundTasks
) -> RetrieveResponse:
    """What past experience says about states like this one: ranked items, each with
    its evidence and utility, optionally rendered as a context block. Logged under
    `retrieval_id` so a later outcome credits what was served."""
    # One hop to the thread pool for the whole request: a sync route takes two (the
    # call, then validating its answer), each 0.1-0.5 ms of a retrieve on a busy machine.
    answer, write_log = await run_in_threadpool(services.retrieval.retrieve_deferred, principal, ns, body)
    after.add_task(write_log)  # journaled already; the database write runs once the answer is sent
    return answer


@router.post(
    "/retrieve/batch",
    response_model=RetrieveBatchResponse,
    operation_id="retrieve_batch",
    responses={
        504: {"model": ErrorResponse, "description": "a consistency_token not searchable within its wait_timeout_ms"}
    },
)
async def retrieve_batch(
    ns: Ns, body: RetrieveBatchRequest, principal: PrincipalDep, services: ServicesDep, after: BackgroundTasks
) -> RetrieveBatchResponse:
    """Many states in one call (a rollout group, many agents): each gets the answer
    `POST …/retrieve` would give it, with its own retrieval id; the texts are encoded
    as one batch and the indexes searched together."""
    answer, write_log = await run_in_threadpool(services.retrieval.retrieve_batch, principal, ns, body)
    after.add_task(write_log)
    return answer


@router.post(
    "/retrievals/{retrieval_id}/outcome", response_model=RetrievalOutcomeRead, operation_id="report_retrieval_outcome"
)
def report_retrieval_outcome(
    ns: Ns, retrieval_id: RetrievalId, body: RetrievalOutcomeCreate, principal: PrincipalDep, services: ServicesDep
) -> RetrievalOutcomeRead:
    """Credit the served items with the outcome (once; an identical repeat is a replay)."""
    return services.retrieval.report_outcome(principal, ns, retrieval_id, body)
