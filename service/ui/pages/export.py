"""Trainer datasets from the UI: the same export as GET /v1/namespaces/{ns}/export,
through the same service, for the signed-in session (the API takes a bearer key,
and the session cookie is scoped to /ui)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from service.auth import Permission
from service.deps import ServicesDep
from service.export.schemas import ExportQuery
from service.params import Ns
from service.ui.params import Fields, validated
from service.ui.web import UI_PREFIX, UiSessionDep

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/export", include_in_schema=False)

# The trajectories page's filters, named as the export names them (its task box is
# a substring search: task_contains).
TEXT = ("environment", "agent", "policy_version", "group_id")


@router.get("")
def export(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    session.principal.require(Permission.EXPORT, ns)  # scope first: another namespace is a 404, not a 422
    f = Fields(request.query_params)
    values = {
        "dataset": f.text("dataset"),
        "format": f.text("format"),
        **{name: f.text(name) for name in TEXT},
        "task_contains": f.text("task", max_length=2000),
        "success": f.boolean("success"),
        "created_after": f.moment("created_after"),
        "created_before": f.moment("created_before"),
    }
    query = validated(ExportQuery, **{k: v for k, v in values.items() if v is not None})
    out = services.exports.open(session.principal, ns, query, distill=services.distill)
    return StreamingResponse(
        out.chunks, media_type=out.media_type, headers={"Content-Disposition": f'attachment; filename="{out.filename}"'}
    )
