"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from migrations import schema_status

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz", responses={503: {"description": "not ready; see checks"}})
def readyz(request: Request) -> JSONResponse:
    """Ready to serve: the database answers and its schema is current."""
    services = request.app.state.services
    checks: dict[str, Any] = {}
    ok = True
    try:
        with services.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        status = schema_status(services.db.engine)
        checks["database"] = {"ok": True, "dialect": services.db.dialect}
        checks["schema"] = {
            "ok": status.up_to_date,
            "current": list(status.current),
            "head": list(status.head),
        }
        ok = status.up_to_date
    except Exception as exc:  # readiness reports failures, it does not raise them
        checks["database"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        ok = False
    return JSONResponse({"status": "ready" if ok else "not_ready", "checks": checks}, status_code=200 if ok else 503)


@router.get("/metrics", operation_id="metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
