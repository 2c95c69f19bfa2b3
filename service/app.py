"""The FastAPI application factory and its lifespan."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.errors import ReflexaError, Unavailable
from domain.schemas import ERROR_RESPONSES
from migrations import schema_status
from service.check.router import router as check_router
from service.container import Services
from service.distill.advantages.router import router as advantages_router
from service.distill.contexts.router import router as distill_router
from service.distill.prefixes.router import router as prefixes_router
from service.distill.teacher.router import router as teacher_router
from service.export.router import router as export_router
from service.health.router import router as health_router
from service.jobs.router import router as jobs_router
from service.keys.router import router as keys_router
from service.limits.body import BodyLimitMiddleware
from service.limits.per_key import KeyLimitMiddleware
from service.limits.storable import refuse_unstorable
from service.metrics import Metrics, MetricsMiddleware
from service.namespaces.router import router as namespaces_router
from service.reflections.router import router as reflections_router
from service.request_id import RequestIdMiddleware, install_log_record_factory
from service.retrieval.router import router as retrieval_router
from service.rubrics.router import router as rubrics_router
from service.settings import Settings, get_settings
from service.snapshots.router import router as snapshots_router
from service.tasks.router import router as tasks_router
from service.trajectories.router import router as trajectories_router
from service.ui.install import install_ui, ui_http_error, ui_reflexa_error, ui_validation_error
from service.ui.web import UiHeadersMiddleware, is_ui
from store.database import Database, overloaded

log = logging.getLogger("reflexa")


class SchemaOutOfDate(RuntimeError):
    pass


def check_schema(db: Database) -> None:
    status = schema_status(db.engine)
    if not status.up_to_date:
        raise SchemaOutOfDate(status.upgrade_hint())


def _field_path(loc: tuple[Any, ...]) -> str:
    """('body', 'steps', 3, 'state', 'observation') -> 'steps[3].state.observation'."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    if is_ui(request.url.path):
        return ui_validation_error(request, exc)
    errors = []
    for err in exc.errors():
        field = _field_path(tuple(err.get("loc", ())))
        rule = err.get("type", "invalid")
        if rule == "json_invalid":
            field = "body"
        errors.append({"field": field, "rule": rule, "message": f"{field}: {err.get('msg', 'invalid')}"})
    first = errors[0] if errors else {"field": "body", "rule": "invalid", "message": "invalid request"}
    body = {"error": {"type": "invalid_input", **first, "errors": errors}}
    return JSONResponse(body, status_code=422)


def _reflexa_error(request: Request, exc: ReflexaError) -> Response:
    if is_ui(request.url.path):
        return ui_reflexa_error(request, exc)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.to_body(), status_code=exc.status, headers=headers)


def _database_unavailable(request: Request, exc: Exception) -> Response:
    # The database is down or restarting, or up but saturated (store.database.overloaded):
    # expected conditions, retried by the client; nothing was committed for this request.
    if overloaded(exc):
        log.warning("database overloaded on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        error = Unavailable(
            "the database is up but busy (a connection or lock wait timed out); nothing was written; retry shortly",
            field="database",
            rule="database_overloaded",
        )
    else:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        error = Unavailable(
            "the database is unavailable; nothing was written; retry shortly",
            field="database",
            rule="database_unavailable",
        )
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.database_refused.labels(rule=error.rule).inc()
    if is_ui(request.url.path):
        response = ui_reflexa_error(request, error)
    else:
        response = JSONResponse(error.to_body(), status_code=503)
    response.headers["Retry-After"] = "1"
    return response


def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if is_ui(request.url.path):
        return ui_http_error(request, exc)
    # Framework-raised errors (unknown route, wrong method, undecodable body) get
    # the same error shape as ours.
    kind = {404: "not_found", 405: "method_not_allowed", 400: "invalid_input"}.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 400 and "parsing the body" in message:
        message = "request body is not valid JSON in UTF-8"
    body: dict[str, Any] = {"type": kind, "message": message}
    headers = getattr(exc, "headers", None)
    if exc.status_code == 400:
        body.update(field="body", rule="json_utf8")
    if exc.status_code == 405:
        # The framework names only the first route it matched; a path has a route per method.
        allowed = _allowed_methods(request.app.routes, request.url.path)
        headers = {**(headers or {}), "Allow": ", ".join(sorted(allowed))}
        body["message"] = f"{request.method} is not allowed here; allowed: {', '.join(sorted(allowed))}"
    return JSONResponse({"error": body}, status_code=exc.status_code, headers=headers)


def _allowed_methods(routes: list[Any], path: str) -> set[str]:
    """Every method some route serves at `path` (looking into included routers)."""
    out: set[str] = set()
    for route in routes:
        nested = getattr(route, "original_router", None)
        if nested is not None:
            out |= _allowed_methods(nested.routes, path)
        elif getattr(route, "methods", None) and route.path_regex.match(path):
            out |= set(route.methods)
    return out


def _shared_key_limits(settings: Settings) -> bool:
    scope = settings.limits.key_limits_scope
    if scope == "auto":
        return make_url(settings.resolved_database_url).get_backend_name() == "postgresql"
    return scope == "shared"


def _freeze_startup_objects() -> None:
    """Move every object alive now (modules, schemas, routes, services: ~250k) out of
    the collector's generations. A full collection walks every tracked object and
    holds the GIL throughout: ~100 ms with them, the longest pause a request saw
    (bench/ingest: the max latency at every concurrency, and the p99 at 4 clients).
    They live as long as the process, so walking them finds nothing; what requests
    allocate later is collected as before."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(
            settings.resolved_database_url,
            pool_size=settings.db_pool_size,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        )
        if settings.check_schema:
            check_schema(db)
        services = Services.build(settings, db)
        boot = services.keys.bootstrap_admin(settings.admin_key)
        if boot.generated_secret:
            # Shown once: only its hash is stored.
            print(
                f"\n  Reflexa admin key (shown once, store it now): {boot.generated_secret}\n",
                file=sys.stderr,
                flush=True,
            )
        app.state.services = services
        try:  # what a killed process of this host journaled but never wrote
            services.retrieval.log.recover()
        except Exception:
            logging.getLogger("reflexa").warning("retrieval log journal not replayed at start", exc_info=True)
        metrics.watch(db, services.embedder, services.registry)
        if settings.worker.in_process:
            services.worker.start()
        if settings.freeze_startup_objects:
            _freeze_startup_objects()
        thresholds = gc.get_threshold()
        if settings.gc_young_threshold is not None:
            gc.set_threshold(settings.gc_young_threshold, *thresholds[1:])
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            if settings.freeze_startup_objects:
                gc.unfreeze()  # what this app built may be collected once it is gone (tests run many apps)
            services.worker.stop()
            services.worker.close()
            services.registry.save_all()
            db.dispose()

    app = FastAPI(
        title="Reflexa",
        version="0.1.0",
        summary="Agent memory and reflection service",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,  # every route's errors share one documented shape
        dependencies=[Depends(refuse_unstorable)],  # what storage cannot hold, in any field of any route
    )
    metrics = Metrics()
    app.state.metrics = metrics
    install_log_record_factory()
    limits = settings.limits
    # Innermost first: the request id wraps everything, so even a 413 or a 429 has one.
    if settings.ui.enabled:
        app.add_middleware(UiHeadersMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_seconds)
    app.add_middleware(
        KeyLimitMiddleware,
        rate=limits.requests_per_second_per_key,
        burst=limits.request_burst_per_key,
        max_concurrent=limits.max_concurrent_requests_per_key,
        refused=metrics.rate_limited,
        shared=(lambda: app.state.services.db) if _shared_key_limits(settings) else None,
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(RequestIdMiddleware)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ReflexaError, _reflexa_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(OperationalError, _database_unavailable)
    app.add_exception_handler(InterfaceError, _database_unavailable)
    app.add_exception_handler(PoolTimeout, _database_unavailable)
    routers = (
        health_router,
        keys_router,
        namespaces_router,
        trajectories_router,
        retrieval_router,
        check_router,
        reflections_router,
        jobs_router,
        snapshots_router,
        distill_router,
        prefixes_router,
        advantages_router,
        export_router,
        tasks_router,
        rubrics_router,
        teacher_router,
    )
    for router in routers:
        app.include_router(router)
    if settings.ui.enabled:
        install_ui(app)
    return app
