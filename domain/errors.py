"""Domain errors. Domain code raises these (never HTTPException); one handler in
service.app renders them as {"error": {"type", "message", "field", "rule"}}."""

from __future__ import annotations


class ReflexaError(Exception):
    status = 500
    type = "internal"

    def __init__(self, message: str, *, field: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.rule = rule

    def to_body(self) -> dict[str, object]:
        body: dict[str, object] = {"type": self.type, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.rule is not None:
            body["rule"] = self.rule
        return {"error": body}


class InvalidInput(ReflexaError):
    status = 422
    type = "invalid_input"


class PayloadTooLarge(ReflexaError):
    status = 413
    type = "payload_too_large"


class RequestTimeout(ReflexaError):
    status = 408
    type = "request_timeout"


class TooManyRequests(ReflexaError):
    """A key over its rate or its concurrent requests; `retry_after` seconds to wait."""

    status = 429
    type = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, field: str | None = None, rule: str | None = None) -> None:
        super().__init__(message, field=field, rule=rule)
        self.retry_after = retry_after


class Unauthorized(ReflexaError):
    status = 401
    type = "unauthorized"


class Forbidden(ReflexaError):
    status = 403
    type = "forbidden"


class NotFound(ReflexaError):
    status = 404
    type = "not_found"


class Conflict(ReflexaError):
    status = 409
    type = "conflict"


class Unavailable(ReflexaError):
    status = 503
    type = "unavailable"


class BadGateway(ReflexaError):
    """An upstream server we depend on (a teacher model endpoint) failed or answered
    with something unusable; the message names it."""

    status = 502
    type = "bad_gateway"


class GatewayTimeout(ReflexaError):
    """An upstream server we depend on did not answer in time; the message names it."""

    status = 504
    type = "gateway_timeout"
