"""Sending an :class:`~reflexa._operations.Operation` over httpx, with retries.

The sync and async transports run the same loop — send, return on 2xx, otherwise
ask the :class:`~reflexa._retry.RetryPolicy` whether and how long to wait — and
differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol, TypeVar

import httpx

from reflexa._consistency import ConsistencySession
from reflexa._operations import Download, Operation
from reflexa._version import __version__
from reflexa.config import ClientConfig
from reflexa.errors import ConnectionFailed, ReflexaError, error_from_response, parse_retry_after

T = TypeVar("T")

log = logging.getLogger("reflexa")

# Module attributes so tests can observe the waits instead of sleeping through them.
_sleep = time.sleep
_async_sleep = asyncio.sleep


def _headers(config: ClientConfig) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": f"reflexa-python/{__version__}"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return headers


def _parsed(op: Operation[T], response: httpx.Response, session: ConsistencySession) -> T:
    """The answer, with a write's consistency token remembered for later retrieves."""
    result = op.parse(response)
    if op.session_namespace is not None:
        session.record(op.session_namespace, getattr(result, "consistency_token", None))
    return result


class ByteSink(Protocol):
    """Where a download's bytes go; `restart` drops what an earlier attempt wrote."""

    def restart(self) -> None: ...

    def write(self, chunk: bytes) -> None: ...


class _Attempts:
    """The part of the retry loop that does not wait: decide, log, or raise."""

    def __init__(self, config: ClientConfig, op: Operation[Any] | Download) -> None:
        self._policy = config.retry
        self._op = op
        self.count = 0

    def after_response(self, response: httpx.Response) -> float:
        """The wait before the next attempt, or the mapped error if there is none."""
        error = error_from_response(response)
        if not error.retry_on_status:
            raise error
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        wait = self._policy.wait_after_status(response.status_code, self.count, self._op.retry, retry_after)
        return self._next(wait, error)

    def after_exception(self, exc: httpx.TransportError) -> float:
        """The wait before the next attempt, or :class:`ConnectionFailed` if there is none."""
        wait = self._policy.wait_after_exception(exc, self.count, self._op.retry)
        error = ConnectionFailed(f"{self._op.method} {self._op.path}: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return self._next(wait, error)

    def _next(self, wait: float | None, error: ReflexaError) -> float:
        if wait is None:
            raise error
        self.count += 1
        log.debug(
            "retrying %s %s in %.2fs (attempt %d): %s",
            self._op.method,
            self._op.path,
            wait,
            self.count,
            error,
        )
        return wait


class _Requests:
    """What either transport sends for an operation or a download: the same URL,
    parameters, body, headers and timeout, whichever way the answer is waited for."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._headers = _headers(config)
        #: Tokens of this client's writes, for read-your-writes retrieves.
        self.session = ConsistencySession()

    def _request(self, op: Operation[Any]) -> dict[str, Any]:
        return {
            "method": op.method,
            "url": self.config.base_url + op.path,
            "params": op.params,
            "json": op.body,
            "content": op.content,
            "headers": op.headers(self._headers),
            "timeout": self.config.timeout + op.server_wait,
        }

    def _download(self, dl: Download) -> dict[str, Any]:
        return {
            "method": dl.method,
            "url": self.config.base_url + dl.path,
            "params": dl.params,
            "headers": self._headers,
            "timeout": self.config.timeout + dl.server_wait,
        }


class SyncTransport(_Requests):
    """Runs operations on an ``httpx.Client``; thread-safe, as httpx's client is."""

    def __init__(self, config: ClientConfig, http_client: httpx.Client | None = None) -> None:
        super().__init__(config)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(timeout=config.timeout)

    def send(self, op: Operation[T]) -> T:
        attempts = _Attempts(self.config, op)
        while True:
            try:
                response = self._http.request(**self._request(op))
            except httpx.TransportError as exc:
                wait = attempts.after_exception(exc)
            else:
                if response.is_success:
                    return _parsed(op, response, self.session)
                wait = attempts.after_response(response)
            _sleep(wait)

    def stream(self, dl: Download, sink: ByteSink) -> None:
        """Write the answer's bytes to ``sink`` as they arrive. A retry (the same
        rules as :meth:`send`, a connection lost mid-stream included) restarts the sink."""
        attempts = _Attempts(self.config, dl)
        while True:
            sink.restart()
            try:
                with self._http.stream(**self._download(dl)) as response:
                    if response.is_success:
                        for chunk in response.iter_bytes():
                            sink.write(chunk)
                        return
                    response.read()
                    wait = attempts.after_response(response)
            except httpx.TransportError as exc:
                wait = attempts.after_exception(exc)
            _sleep(wait)

    def close(self) -> None:
        """Close the httpx client if this transport made it (a caller's stays theirs)."""
        if self._owns_http:
            self._http.close()


class AsyncTransport(_Requests):
    """Runs operations on an ``httpx.AsyncClient``."""

    def __init__(self, config: ClientConfig, http_client: httpx.AsyncClient | None = None) -> None:
        super().__init__(config)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient(timeout=config.timeout)

    async def send(self, op: Operation[T]) -> T:
        attempts = _Attempts(self.config, op)
        while True:
            try:
                response = await self._http.request(**self._request(op))
            except httpx.TransportError as exc:
                wait = attempts.after_exception(exc)
            else:
                if response.is_success:
                    return _parsed(op, response, self.session)
                wait = attempts.after_response(response)
            await _async_sleep(wait)

    async def stream(self, dl: Download, sink: ByteSink) -> None:
        """As :meth:`SyncTransport.stream`."""
        attempts = _Attempts(self.config, dl)
        while True:
            sink.restart()
            try:
                async with self._http.stream(**self._download(dl)) as response:
                    if response.is_success:
                        async for chunk in response.aiter_bytes():
                            sink.write(chunk)
                        return
                    await response.aread()
                    wait = attempts.after_response(response)
            except httpx.TransportError as exc:
                wait = attempts.after_exception(exc)
            await _async_sleep(wait)

    async def aclose(self) -> None:
        """Close the httpx client if this transport made it (a caller's stays theirs)."""
        if self._owns_http:
            await self._http.aclose()
