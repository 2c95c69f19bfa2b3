"""A real OpenAI-compatible chat server for tests: FastAPI on uvicorn in a background
thread, on 127.0.0.1 at a free port, answering POST /v1/chat/completions from a
script. The code under test talks to it with the real openai client over real HTTP,
so retries, timeouts, Retry-After and error mapping are exercised as in production.

Each request consumes the next scripted reply:
- `Answer`: a chat completion whose assistant content is the given text (use
  `json_answer` for JSON, or any text for malformed output), with `model` and `usage`
  fields, optionally after a short delay (for concurrency tests);
- `HttpError`: an error status (429, 500, 503, 400…) in OpenAI's error shape,
  optionally with Retry-After;
- `Stall`: no answer for longer than the client's timeout.
An empty script answers 500 "script exhausted", and the fixture fails a test that
left replies unused, so a test that scripts the wrong number of calls fails loudly.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DEFAULT_MODEL = "scripted-model"


@dataclass(frozen=True)
class Answer:
    """A 200 chat completion with `content` as the assistant message. Token counts
    default to len/4 of the request's messages and of `content`; `usage=False`
    leaves the usage field out, as some servers do."""

    content: str
    model: str = DEFAULT_MODEL
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage: bool = True
    finish_reason: str = "stop"
    delay: float = 0.0


def json_answer(value: Any, **options: Any) -> Answer:
    return Answer(json.dumps(value), **options)


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = "scripted error"
    retry_after: float | None = None
    """Seconds, sent as the Retry-After header (the openai client honours fractions)."""


@dataclass(frozen=True)
class Stall:
    """Answer nothing for `seconds` (longer than the client's timeout). Cut short when
    the server stops, so a stalled request never holds up teardown."""

    seconds: float


Reply = Answer | HttpError | Stall


@dataclass(frozen=True)
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.body.get("response_format")

    @property
    def model(self) -> str:
        return self.body["model"]


@dataclass
class ScriptedLLM:
    """The server's state: the script, what it received, and how many requests it
    served at once (`max_in_flight`)."""

    url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    max_in_flight: int = 0
    exhausted: int = 0
    _script: deque[Reply] = field(default_factory=deque)
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def script(self, *replies: Reply) -> None:
        """Queue replies, answered in order, one per request (retries included)."""
        with self._lock:
            self._script.extend(replies)

    @property
    def unused(self) -> int:
        with self._lock:
            return len(self._script)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> JSONResponse:
            body = await request.json()
            with self._lock:
                self.requests.append(RecordedRequest(body, dict(request.headers)))
                reply = self._script.popleft() if self._script else None
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
            try:
                return await self._respond(reply, body)
            finally:
                with self._lock:
                    self._in_flight -= 1

        return app

    async def _respond(self, reply: Reply | None, body: dict[str, Any]) -> JSONResponse:
        if reply is None:
            with self._lock:
                self.exhausted += 1
            return _error(500, "script exhausted")
        if isinstance(reply, Stall):
            await self._sleep(reply.seconds)
            return _error(504, "stalled")
        if isinstance(reply, HttpError):
            headers = {"Retry-After": f"{reply.retry_after:g}"} if reply.retry_after is not None else None
            return _error(reply.status, reply.message, headers)
        await self._sleep(reply.delay)
        return JSONResponse(self._completion(reply, body))

    def _completion(self, reply: Answer, body: dict[str, Any]) -> dict[str, Any]:
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if reply.usage:
            prompt = reply.prompt_tokens
            if prompt is None:
                prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
            answer = reply.completion_tokens if reply.completion_tokens is not None else len(reply.content) // 4 + 1
            completion["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": answer,
                "total_tokens": prompt + answer,
            }
        return completion

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._closing.is_set():
            await asyncio.sleep(0.01)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": None}}, status, headers=headers)


@contextmanager
def serve_scripted_llm() -> Iterator[ScriptedLLM]:
    """Run a ScriptedLLM on a free port for the duration of the block."""
    state = ScriptedLLM()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(state.app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="scripted-llm", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the scripted LLM server did not start")
        time.sleep(0.01)
    state.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        yield state
    finally:
        state._closing.set()
        server.should_exit = True
        thread.join(10)
        sock.close()
