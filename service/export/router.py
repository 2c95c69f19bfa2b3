"""GET /v1/namespaces/{ns}/export: training datasets, streamed (trainers, operators)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from domain.schemas import ErrorResponse
from service.deps import PrincipalDep, ServicesDep
from service.export.schemas import MEDIA_TYPES, ExportQuery
from service.params import Ns

router = APIRouter(prefix="/v1/namespaces/{ns}", tags=["export"])


@router.get(
    "/export",
    operation_id="export_dataset",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "the dataset, streamed: JSON lines (one row per line) or a parquet file",
            "content": {media: {} for media in MEDIA_TYPES.values()},
        },
        403: {"description": "the key's role may not export (agents)"},
        404: {"model": ErrorResponse, "description": "unknown namespace, or `snapshot` names no snapshot of it"},
        422: {
            "model": ErrorResponse,
            "description": "unknown dataset, format or parameter; `limit` over limits.max_export_rows",
        },
    },
)
def export_dataset(
    ns: Ns, query: Annotated[ExportQuery, Query()], principal: PrincipalDep, services: ServicesDep
) -> StreamingResponse:
    """A training dataset of the namespace, written as it is read (flat memory).

    Rows (docs/trainers.md, "Datasets"): `trajectories` (one per trajectory, with
    its steps), `sft` (chat `messages` per step of successful trajectories, for
    TRL's SFTTrainer; `context` picks a teacher context of POST …/distill/contexts
    as the prompt), `preferences` (chosen / rejected actions at the same state,
    TRL's conversational preference shape, with the heuristic that tells them
    apart as `hint`), `attempts` (first attempt, reflection, next attempt).
    With `snapshot` the export is the same bytes every time. Errors come before
    the first byte; `limit` is capped by the `limits.max_export_rows` setting
    (REFLEXA_LIMITS__MAX_EXPORT_ROWS)."""
    export = services.exports.open(principal, ns, query, distill=services.distill)
    return StreamingResponse(
        export.chunks,
        media_type=export.media_type,
        headers={"Content-Disposition": f'attachment; filename="{export.filename}"'},
    )
