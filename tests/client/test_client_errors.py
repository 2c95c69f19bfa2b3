"""Error responses become the exceptions named like the server's, whatever their body."""

from __future__ import annotations

import httpx
import pytest
from reflexa import errors
from reflexa.errors import error_from_response, parse_retry_after


def _response(status: int, body: object = None, text: str | None = None, **headers: str) -> httpx.Response:
    if text is not None:
        return httpx.Response(status, text=text, headers=headers)
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (422, "invalid_input", errors.InvalidInput),
        (413, "payload_too_large", errors.PayloadTooLarge),
        (401, "unauthorized", errors.Unauthorized),
        (403, "forbidden", errors.Forbidden),
        (404, "not_found", errors.NotFound),
        (409, "conflict", errors.Conflict),
        (429, "rate_limited", errors.RateLimited),
        (503, "unavailable", errors.Unavailable),
    ],
)
def test_server_error_types_map_to_same_named_exceptions(status: int, kind: str, expected: type) -> None:
    body = {"error": {"type": kind, "message": "nope", "field": "steps[2].state.observation", "rule": "r"}}
    error = error_from_response(_response(status, body))
    assert type(error) is expected
    assert isinstance(error, errors.ReflexaError)
    assert (error.status, error.type, error.message) == (status, kind, "nope")
    assert (error.field, error.rule) == ("steps[2].state.observation", "r")
    assert "steps[2].state.observation" in str(error)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, errors.InvalidInput),
        (404, errors.NotFound),
        (500, errors.Unavailable),
        (502, errors.Unavailable),
        (504, errors.Unavailable),
        (418, errors.ReflexaError),
    ],
)
def test_bodies_that_are_not_ours_map_by_status(status: int, expected: type) -> None:
    error = error_from_response(_response(status, text="<html>bad gateway</html>"))
    assert type(error) is expected
    assert error.status == status
    assert "bad gateway" in error.message


def test_type_wins_over_status_and_unknown_types_fall_back_to_status() -> None:
    assert type(error_from_response(_response(400, {"error": {"type": "conflict", "message": "m"}}))) is (
        errors.Conflict
    )
    unknown = error_from_response(_response(400, {"error": {"type": "method_not_allowed", "message": "m"}}))
    assert type(unknown) is errors.InvalidInput
    assert unknown.type == "method_not_allowed"


def test_framework_detail_bodies_keep_their_message() -> None:
    error = error_from_response(_response(404, {"detail": "Not Found"}))
    assert type(error) is errors.NotFound
    assert error.message == "Not Found"


def test_rate_limited_carries_the_retry_after_hint() -> None:
    error = error_from_response(
        _response(429, {"error": {"type": "rate_limited", "message": "slow"}}, **{"Retry-After": "7"})
    )
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after == 7.0
    assert error.transient


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("3", 3.0), ("0.5", 0.5), ("-1", None), ("Wed, 21 Oct 2015 07:28:00 GMT", None), (None, None)],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_only_temporary_conditions_are_transient() -> None:
    assert errors.Unavailable("x").transient and errors.ConnectionFailed("x").transient
    assert not errors.Conflict("x").transient and not errors.InvalidInput("x").transient
