"""Refuse request bodies over the configured size with 413, before parsing them,
and bodies that take longer than the configured time to arrive with 408 (a slow
client, or one trickling bytes to hold a connection, never pins a worker)."""

from __future__ import annotations

import asyncio
import time

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from domain.errors import PayloadTooLarge, ReflexaError, RequestTimeout


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 60.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _error(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body is larger than {self.max_bytes} bytes; split it (e.g. smaller batches)",
            field="body",
            rule="max_body_bytes",
        )

    def _slow(self) -> RequestTimeout:
        return RequestTimeout(
            f"the request body did not arrive within {self.timeout_s:g} s", field="body", rule="body_timeout_seconds"
        )

    async def _reject(self, send: Send, error: ReflexaError | None = None) -> None:
        error = error or self._error()
        body = orjson.dumps(error.to_body())
        await send(
            {
                "type": "http.response.start",
                "status": error.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        received = 0
        refused: ReflexaError | None = None
        rejected = False
        body_done = False
        deadline = time.monotonic() + self.timeout_s
        loop = asyncio.get_running_loop()

        async def reject_once() -> None:
            nonlocal rejected
            if not rejected:
                rejected = True
                await self._reject(send, refused)

        async def counting_receive() -> Message:
            nonlocal received, refused, body_done
            if body_done:  # after the body: only a disconnect can come, wait for it as long as it takes
                return await receive()
            try:
                # A deadline on this await, not a task per chunk (wait_for's): this is the ingest path.
                async with asyncio.timeout_at(loop.time() + max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                refused = self._slow()
                raise BodyTooSlow from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    refused = self._error()
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # The framework turns our exception into its own 400 while parsing the
            # body; answer with the 413 (or 408) it really is instead.
            if refused is not None:
                if message["type"] == "http.response.start":
                    await reject_once()
                return
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except (BodyTooLarge, BodyTooSlow):
            await reject_once()
