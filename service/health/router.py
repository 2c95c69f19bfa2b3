"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.health.service import readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz", responses={503: {"description": "not ready; see checks"}})
def readyz(request: Request) -> JSONResponse:
    """Ready to serve: the database answers, its schema is current, the in-process
    worker (if configured) runs; with queue depths and the embedder in use."""
    ok, checks = readiness(request.app.state.services)
    return JSONResponse({"status": "ready" if ok else "not_ready", "checks": checks}, status_code=200 if ok else 503)


@router.get("/metrics", operation_id="metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
