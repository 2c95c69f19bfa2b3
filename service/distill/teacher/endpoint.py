"""The one way the teacher routes talk to a teacher server: JSON POSTs with
timeouts, bounded retries and errors that name the endpoint.

Connection errors, 429 and 5xx are retried with exponential backoff (a Retry-After
is honoured up to MAX_RETRY_AFTER); after the last try they become 502
`teacher_unavailable`. No answer within `teacher.timeout_seconds` is 504
`teacher_timeout`, not retried: a teacher that is slow now would be as slow again,
and the trainer waiting on us should hear it at once. Any other 4xx is 502
`teacher_refused` with the endpoint's own words (a retry would be refused the same
way). Scoring is a pure read on the endpoint, so repeating a request that may have
arrived is harmless.

The process holds at most `teacher.max_concurrency` requests in flight; a slot is
kept through the retry waits, so that a struggling endpoint sees this process slow
down rather than more requests from it (as reflectors.llm_client does).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from domain.errors import BadGateway, GatewayTimeout
from service.settings import TeacherSettings

MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is not waited for
MAX_BACKOFF = 10.0
_ERROR_CHARS = 300  # of an endpoint's error body quoted in ours


def root_url(base_url: str) -> str:
    """The server's root: no trailing slash, no trailing /v1 (a habit from OpenAI clients)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def shown_url(url: str) -> str:
    """`url` without user, password, query or fragment: what errors may print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass
class Stats:
    """What one request of ours cost at the endpoint (shared by the threads scoring it)."""

    requests: int = 0
    retries: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)  # monotonic (start, end) of scoring calls
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, requests: int = 0, retries: int = 0, interval: tuple[float, float] | None = None) -> None:
        with self._lock:
            self.requests += requests
            self.retries += retries
            if interval is not None:
                self.intervals.append(interval)

    def busy_seconds(self) -> float:
        """The union of the intervals: wall time with a call in flight."""
        total = 0.0
        end = float("-inf")
        for start, stop in sorted(self.intervals):
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        return total


class TeacherEndpoint:
    """One configured teacher server. Thread-safe; `session()` opens the HTTP
    connection pool one request of ours uses."""

    def __init__(self, settings: TeacherSettings) -> None:
        if not settings.base_url:
            raise ValueError("no teacher configured: set teacher.base_url")
        self.settings = settings
        self.root = root_url(settings.base_url)
        self.shown = shown_url(self.root)
        self._timeout = httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds)
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.slots = threading.BoundedSemaphore(settings.max_concurrency)

    @contextmanager
    def session(self, stats: Stats) -> Iterator[EndpointSession]:
        limits = httpx.Limits(max_connections=self.settings.max_concurrency)
        with httpx.Client(timeout=self._timeout, headers=self._headers, limits=limits) as client:
            yield EndpointSession(self, client, stats)


class EndpointSession:
    def __init__(self, endpoint: TeacherEndpoint, client: httpx.Client, stats: Stats) -> None:
        self.endpoint = endpoint
        self.client = client
        self.stats = stats

    def post(self, path: str, body: dict[str, Any], *, scoring: bool = True) -> tuple[Any, float]:
        """POST `body` to `path`; returns the JSON answer and the seconds the answer
        took (the successful attempt's). `scoring` calls count in the stats."""
        e = self.endpoint
        url = e.root + path
        where = f"teacher endpoint {e.shown}{path}"
        attempts = e.settings.max_retries + 1
        problem = ""
        with e.slots:
            for attempt in range(attempts):
                if attempt:
                    self.stats.add(retries=1)
                wait: float | None = None
                started = time.monotonic()
                try:
                    response = self.client.post(url, json=body)
                except httpx.ConnectTimeout as exc:
                    problem = f"no connection within {e.settings.connect_timeout_seconds:g} s ({exc})"
                except httpx.TimeoutException as exc:
                    raise GatewayTimeout(
                        f"{where} did not answer within {e.settings.timeout_seconds:g} s (teacher.timeout_seconds)",
                        rule="teacher_timeout",
                    ) from exc
                except httpx.TransportError as exc:  # refused, reset, cut mid-answer
                    problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                else:
                    ended = time.monotonic()
                    if scoring:
                        self.stats.add(requests=1, interval=(started, ended))
                    status = response.status_code
                    if status < 400:
                        return _json(response, where), ended - started
                    detail = _detail(response)
                    if status != 429 and status < 500:
                        raise BadGateway(f"{where} refused the request ({status}): {detail}", rule="teacher_refused")
                    problem = f"{status}: {detail}"
                    wait = _retry_after(response.headers.get("retry-after"))
                if attempt + 1 == attempts:
                    break
                if wait is None:
                    wait = min(MAX_BACKOFF, e.settings.retry_backoff_seconds * 2.0**attempt)
                elif wait > MAX_RETRY_AFTER:
                    problem += f" (asked to retry after {wait:g} s)"
                    break
                time.sleep(wait)
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        raise BadGateway(f"{where} unavailable after {tries}: {problem}", rule="teacher_unavailable")


def _json(response: httpx.Response, where: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadGateway(
            f"{where} answered {response.status_code} with a body that is not JSON: {response.text[:_ERROR_CHARS]!r}",
            rule="teacher_bad_response",
        ) from exc


def _detail(response: httpx.Response) -> str:
    """The endpoint's error in a few words: vLLM and SGLang put it under error.message
    or message, FastAPI under detail."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:_ERROR_CHARS] or response.reason_phrase
    if isinstance(body, dict):
        for candidate in (body.get("error"), body):
            if isinstance(candidate, dict):
                for key in ("message", "detail"):
                    if candidate.get(key):
                        return str(candidate[key])[:_ERROR_CHARS]
    return json.dumps(body)[:_ERROR_CHARS]


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: our own backoff applies
    return seconds if seconds >= 0 else None
