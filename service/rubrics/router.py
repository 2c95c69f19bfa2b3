"""/v1/namespaces/{ns}/rubrics (rubrics, rubric rewards, reward capabilities) and
/v1/reward/{capability} (OpenRLHF's remote reward model, no API key)."""

from __future__ import annotations

import logging
import re
from typing import Annotated

from fastapi import APIRouter, Path, Response

from domain.schemas import ID_PATTERN
from service.deps import PageLimit, PrincipalDep, ServicesDep
from service.params import Ns
from service.responses import created_or_replayed, replay_response
from service.rubrics import openrlhf
from service.rubrics.schemas import (
    CapabilityCreate,
    CapabilityCreated,
    CapabilityPage,
    OpenRLHFRequest,
    OpenRLHFResponse,
    RubricCreate,
    RubricRead,
    ScoreBatchRead,
    ScoreBatchRequest,
    ScoreRead,
    ScoreRequest,
)

RubricId = Annotated[str, Path(pattern=ID_PATTERN, description="rubric id")]
CapabilityId = Annotated[str, Path(pattern=ID_PATTERN, description="reward capability id (not its secret)")]

router = APIRouter(tags=["rubrics"])
_RUBRICS = "/v1/namespaces/{ns}/rubrics"
_SECRET_IN_PATH = re.compile(r"(/v1/reward/)[^/?#\s\"']+")


class RedactRewardSecrets(logging.Filter):
    """Replaces the secret of /v1/reward/<secret> in a log record (uvicorn's access
    log prints request paths) with `<redacted>`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _SECRET_IN_PATH.sub(r"\1<redacted>", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                _SECRET_IN_PATH.sub(r"\1<redacted>", a) if isinstance(a, str) else a for a in record.args
            )
        return True


def redact_access_log() -> None:
    """Install the filter on uvicorn's access logger once (`reflexa serve` turns the
    access log off; a plain `uvicorn service.app:create_app --factory` has it on)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactRewardSecrets) for f in logger.filters):
        logger.addFilter(RedactRewardSecrets())


redact_access_log()


@router.post(
    _RUBRICS,
    response_model=RubricRead,
    status_code=201,
    operation_id="create_rubric",
    responses=replay_response(RubricRead),
)
def create_rubric(
    ns: Ns, body: RubricCreate, principal: PrincipalDep, services: ServicesDep, response: Response
) -> RubricRead:
    """A rubric (a reflection of kind rubric) with a client-supplied id; the criteria
    are checked (422 naming `criteria[i].<field>` and the rule). The same body again
    is a replay (200); another body under that id is a 409."""
    return created_or_replayed(services.rubrics.create(principal, ns, body), response)


@router.get(_RUBRICS + "/{id}", response_model=RubricRead, operation_id="get_rubric")
def get_rubric(ns: Ns, id: RubricId, principal: PrincipalDep, services: ServicesDep) -> RubricRead:
    """A rubric, written by POST …/rubrics or by the LLM rubrics reflector, with its
    criteria read as the scorer reads them (ids filled in)."""
    return services.rubrics.get(principal, ns, id)


@router.post(_RUBRICS + "/{id}/score", response_model=ScoreRead, operation_id="score_rubric")
def score_rubric(ns: Ns, id: RubricId, body: ScoreRequest, principal: PrincipalDep, services: ServicesDep) -> ScoreRead:
    """The rubric reward of one trajectory (stored, by id, or inline): per criterion
    its score, weight, method (rule | llm | skipped) and rationale, the weighted
    reward, and per stage (steps' metadata.stage) the same. Deterministic under
    `snapshot` for rule criteria."""
    return services.rubrics.score(principal, ns, id, body)


@router.post(_RUBRICS + "/{id}/score/batch", response_model=ScoreBatchRead, operation_id="score_rubric_batch")
def score_rubric_batch(
    ns: Ns, id: RubricId, body: ScoreBatchRequest, principal: PrincipalDep, services: ServicesDep
) -> ScoreBatchRead:
    """A rollout group (or any batch) scored with one rubric; judged criteria of all
    items are asked of the LLM concurrently."""
    return services.rubrics.score_batch(principal, ns, id, body)


@router.post(
    _RUBRICS + "/{id}/capabilities",
    response_model=CapabilityCreated,
    status_code=201,
    operation_id="create_reward_capability",
)
def create_reward_capability(
    ns: Ns, id: RubricId, body: CapabilityCreate, principal: PrincipalDep, services: ServicesDep
) -> CapabilityCreated:
    """A capability URL for OpenRLHF (`--remote_rm_url http://host:port<path>`): the
    secret and its path are shown once."""
    return services.rubrics.capabilities.create(principal, ns, id, body)


@router.get(_RUBRICS + "/{id}/capabilities", response_model=CapabilityPage, operation_id="list_reward_capabilities")
def list_reward_capabilities(
    ns: Ns, id: RubricId, principal: PrincipalDep, services: ServicesDep, limit: PageLimit, cursor: str | None = None
) -> CapabilityPage:
    """Newest first, revoked ones too; never a secret."""
    return services.rubrics.capabilities.list(principal, ns, id, cursor=cursor, limit=limit)


@router.delete(
    _RUBRICS + "/{id}/capabilities/{capability_id}", status_code=204, operation_id="revoke_reward_capability"
)
def revoke_reward_capability(
    ns: Ns, id: RubricId, capability_id: CapabilityId, principal: PrincipalDep, services: ServicesDep
) -> Response:
    """Revoke: its URL answers 404 from now on. Idempotent."""
    services.rubrics.capabilities.revoke(principal, ns, id, capability_id)
    return Response(status_code=204)


@router.post(
    "/v1/reward/{capability}", response_model=OpenRLHFResponse, operation_id="openrlhf_reward", tags=["rewards"]
)
def openrlhf_reward(capability: str, body: OpenRLHFRequest, services: ServicesDep) -> OpenRLHFResponse:
    """OpenRLHF's remote reward model protocol on the capability's rubric: no
    Authorization header, the secret in the path. `{"query", "prompts", "labels"}`
    -> `{"rewards", "scores", "extra_logs"}`; an unknown or revoked capability is a 404."""
    return openrlhf.score(services.rubrics, capability, body)
