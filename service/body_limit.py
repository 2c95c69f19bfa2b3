"""Refuse request bodies over the configured size with 413, before parsing them."""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from domain.errors import PayloadTooLarge


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _error(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body is larger than {self.max_bytes} bytes; split it (e.g. smaller batches)",
            field="body",
            rule="max_body_bytes",
        )

    async def _reject(self, send: Send) -> None:
        body = orjson.dumps(self._error().to_body())
        await send(
            {
                "type": "http.response.start",
                "status": 413,
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
        too_large = False
        rejected = False

        async def reject_once() -> None:
            nonlocal rejected
            if not rejected:
                rejected = True
                await self._reject(send)

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # The framework turns our exception into its own 400 while parsing the
            # body; answer with the 413 it really is instead.
            if too_large:
                if message["type"] == "http.response.start":
                    await reject_once()
                return
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except BodyTooLarge:
            await reject_once()
