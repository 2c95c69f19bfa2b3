"""Exceptions raised by the client, named like the server's so one `except` clause
reads the same on both sides of the wire.

The server renders every error as ``{"error": {"type", "message", "field"?, "rule"?}}``.
:func:`error_from_response` turns such a response back into the matching exception,
by ``type`` first (the server's own word for what went wrong) and by HTTP status
when the body is not ours (a proxy's 502, a framework's plain 404).
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx


class ReflexaError(Exception):
    """Base of every error this package raises.

    ``status`` is the HTTP status (``None`` when no response was received),
    ``type`` the server's error type, ``field`` the dotted path of the offending
    input (e.g. ``trajectories[3].steps[2].state.observation``) and ``rule`` the
    rule that was broken, when the server names one.
    """

    default_status: ClassVar[int | None] = None
    default_type: ClassVar[str] = "error"
    #: Whether trying the same request again later may succeed.
    transient: ClassVar[bool] = False
    #: Whether the transport may retry at once on this error's status (429, 5xx).
    #: False when the server answered only after a bounded wait of its own.
    retry_on_status: ClassVar[bool] = True

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        field: str | None = None,
        rule: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else self.default_status
        self.type = type if type is not None else self.default_type
        self.field = field
        self.rule = rule

    def __str__(self) -> str:
        parts = [self.message]
        if self.field:
            parts.append(f"field={self.field}")
        if self.rule:
            parts.append(f"rule={self.rule}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        return " | ".join(parts)


class InvalidInput(ReflexaError):
    """The request was refused as malformed (422, or 400), or the client refused to
    send it because it would have been."""

    default_status = 422
    default_type = "invalid_input"


class PayloadTooLarge(ReflexaError):
    default_status = 413
    default_type = "payload_too_large"


class Unauthorized(ReflexaError):
    """Missing, unknown or revoked API key."""

    default_status = 401
    default_type = "unauthorized"


class Forbidden(ReflexaError):
    """The key's role does not allow this action."""

    default_status = 403
    default_type = "forbidden"


class NotFound(ReflexaError):
    """No such object — or one the key may not see (the server does not say which)."""

    default_status = 404
    default_type = "not_found"


class Conflict(ReflexaError):
    """The id is taken by a different body, the index is taken, or the trajectory is closed."""

    default_status = 409
    default_type = "conflict"


class RateLimited(ReflexaError):
    """429 after all retries; ``retry_after`` is the server's last hint in seconds."""

    default_status = 429
    default_type = "rate_limited"
    transient = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Unavailable(ReflexaError):
    """503 or another 5xx after all retries."""

    default_status = 503
    default_type = "unavailable"
    transient = True


class ConsistencyTimeout(ReflexaError):
    """504: the writes named by a consistency token were not searchable in time.

    The writes themselves are stored; only their indexing is late (``rule``
    ``wait_timeout``) or failed (``indexing_failed``). Never retried by the
    transport: the server already waited as long as it was asked to.
    """

    default_status = 504
    default_type = "consistency_timeout"
    retry_on_status = False


class ConnectionFailed(ReflexaError):
    """No usable response: connection refused, timed out or cut, after all retries."""

    default_type = "connection_failed"
    transient = True


class InvalidResponse(ReflexaError):
    """The server answered 2xx with something this client cannot read (wrong proxy, wrong port)."""

    default_type = "invalid_response"


class EpisodeDeliveryError(ReflexaError):
    """Raised by a ``strict`` episode on close when something it accepted was not delivered.

    ``stats`` holds the episode's :class:`reflexa.episode.EpisodeStats` at that moment.
    """

    default_type = "episode_delivery"

    def __init__(self, message: str, *, stats: Any, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.stats = stats


_BY_TYPE: dict[str, type[ReflexaError]] = {
    cls.default_type: cls
    for cls in (
        InvalidInput,
        PayloadTooLarge,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        RateLimited,
        Unavailable,
        ConsistencyTimeout,
    )
}

_BY_STATUS: dict[int, type[ReflexaError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
    429: RateLimited,
}


def _error_class(status: int, error_type: str | None) -> type[ReflexaError]:
    if error_type in _BY_TYPE:
        return _BY_TYPE[error_type]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return Unavailable
    return ReflexaError


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; the HTTP-date form is not worth a
    date parser here and is treated as absent (the backoff then applies)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_response(response: httpx.Response) -> ReflexaError:
    """The exception matching an error response, whatever shape its body has."""
    status = response.status_code
    error_type: str | None = None
    field: str | None = None
    rule: str | None = None
    message = response.reason_phrase or f"HTTP {status}"
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        error_type = error.get("type") if isinstance(error.get("type"), str) else None
        message = str(error.get("message") or message)
        field = error.get("field") if isinstance(error.get("field"), str) else None
        rule = error.get("rule") if isinstance(error.get("rule"), str) else None
    elif isinstance(body, dict) and "detail" in body:
        message = str(body["detail"])
    elif response.text:
        message = response.text[:500]
    cls = _error_class(status, error_type)
    kwargs: dict[str, Any] = {"status": status, "type": error_type, "field": field, "rule": rule}
    if cls is RateLimited:
        kwargs["retry_after"] = parse_retry_after(response.headers.get("Retry-After"))
    return cls(message, **kwargs)
