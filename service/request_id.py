"""A request id on every response (`X-Request-ID`) and in every log line.

A client's own `X-Request-ID` is kept when it is a plausible id (1–128 of
`A-Za-z0-9._:-`), so a trace can follow one request from the trainer through the
load balancer to us; anything else is replaced by a fresh one. The id lives in a
context variable for the request's duration, and a log record factory puts it on
every record (`%(request_id)s`, "-" outside a request). An exception nothing
handled (a bug, never an expected condition) is logged here, with the id, and
answered 500 without internals but with the id, which ties the answer to the log."""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
_VALID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")
request_id: ContextVar[str] = ContextVar("request_id", default="-")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
log = logging.getLogger("reflexa")


def install_log_record_factory() -> None:
    """Every log record gets `request_id` (once per process, whoever calls it)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_reflexa_request_id", False):
        return

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)  # type: ignore[arg-type]
        record.request_id = request_id.get()
        return record

    factory._reflexa_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == HEADER), b"")
        rid = given.decode() if _VALID.match(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        scope.setdefault("state", {})["request_id"] = rid

        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k != HEADER]
                message["headers"] = [*headers, (HEADER, rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            log.error("unhandled %s on %s %s", type(exc).__name__, scope.get("method"), scope.get("path"), exc_info=exc)
            if started:  # the answer is half sent: all we can do is close the connection
                raise
            body = orjson.dumps({"error": {"type": "internal", "message": f"internal error (request id {rid})"}})
            await send_with_id(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            )
            await send_with_id({"type": "http.response.body", "body": body})
        finally:
            request_id.reset(token)
