"""POST /v1/namespaces/{ns}/distill/teacher_logprobs (trainers)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PrincipalDep, ServicesDep
from service.distill.teacher.schemas import TeacherLogprobsRequest, TeacherLogprobsResponse
from service.params import Ns

router = APIRouter(prefix="/v1/namespaces/{ns}/distill", tags=["distill"])


@router.post("/teacher_logprobs", response_model=TeacherLogprobsResponse, operation_id="distill_teacher_logprobs")
def distill_teacher_logprobs(
    ns: Ns, body: TeacherLogprobsRequest, principal: PrincipalDep, services: ServicesDep
) -> TeacherLogprobsResponse:
    """The configured teacher endpoint's log-probs of each item's continuation (the
    student's sampled token ids, or a text), scored after a context given inline
    (text, chat messages or token ids) or built from a stored step and a teacher spec
    as …/distill/contexts would: per continuation token log π_T(y_t | context, y_<t),
    aligned with the tokens; with `top_k` the k likeliest tokens, with `entropy` the
    teacher's entropy. 502 names the endpoint when it fails (teacher_unavailable,
    teacher_refused, teacher_bad_response), 504 when it is too slow (teacher_timeout),
    503 when no teacher is configured."""
    return services.teacher.logprobs(principal, ns, body)
