"""Retries: exponential backoff with jitter, Retry-After honoured, and no retry of a
request that may have taken effect unless repeating it is harmless."""

from __future__ import annotations

import httpx
import pytest
from fake_reflexa import BASE_URL, FakeReflexa, MakeClient
from reflexa import AsyncClient, errors
from reflexa._retry import RetryPolicy

STEP = {"state": {"observation": "o"}, "action": "a"}


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=10, backoff=1.0, max_backoff=8.0)
    for attempt, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (6, 8.0)]:
        waits = {policy.wait(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(waits) > 1  # jittered, so clients failing together spread out
    assert policy.wait(10) is None


def test_retry_after_replaces_the_backoff_unless_it_is_too_long() -> None:
    policy = RetryPolicy(max_retries=3, backoff=1.0, max_backoff=30.0)
    assert policy.wait(0, retry_after=12.0) == 12.0
    assert policy.wait(0, retry_after=31.0) is None


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_429_then_success_waits_what_retry_after_says(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.fail(429, **{"Retry-After": "2"})
    written = make_client().create_trajectory(task="t", steps=[STEP])
    assert written.step_count == 1
    assert sleeps == [2.0]
    assert len(fake.calls) == 2


def test_a_retried_create_sends_the_same_generated_id(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.fail(503, times=2)
    written = make_client().create_trajectory(task="t")
    ids = {call.body["id"] for call in fake.calls}
    assert ids == {written.id}
    assert len(written.id) == 32


def test_503_storm_gives_up_after_max_retries(fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]) -> None:
    fake.fail(503, times=10)
    with pytest.raises(errors.Unavailable) as caught:
        make_client(max_retries=3).create_trajectory(task="t")
    assert caught.value.status == 503
    assert len(fake.calls) == 4
    assert len(sleeps) == 3
    assert sleeps[0] < sleeps[2]  # backing off


def test_connection_errors_are_retried_then_reported(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    client = make_client(max_retries=2)
    fake.raise_(httpx.ConnectError("refused"), times=2)
    assert client.create_trajectory(task="t").status == "open"
    assert len(fake.calls) == 3
    fake.raise_(httpx.ReadTimeout("no answer"), times=3)
    with pytest.raises(errors.ConnectionFailed) as caught:
        client.create_trajectory(task="t")
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert len(fake.calls) == 6


def test_client_errors_are_not_retried(fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]) -> None:
    with pytest.raises(errors.NotFound):
        make_client().get_trajectory(None, "nope")
    assert len(fake.calls) == 1
    assert sleeps == []


def test_too_long_retry_after_surfaces_as_rate_limited(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.fail(429, **{"Retry-After": "3600"})
    with pytest.raises(errors.RateLimited) as caught:
        make_client(max_backoff=30).create_trajectory(task="t")
    assert caught.value.retry_after == 3600
    assert sleeps == []


def test_maybe_applied_failures_are_not_retried_for_a_new_key(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.fail(502)
    with pytest.raises(errors.Unavailable):
        make_client().create_key("agent", ["ns1"])
    fake.raise_(httpx.ReadTimeout("slow"))
    with pytest.raises(errors.ConnectionFailed):
        make_client().create_key("agent", ["ns1"])
    assert sleeps == []


def test_unsent_failures_are_retried_even_for_a_new_key(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.raise_(httpx.ConnectError("refused"))
    fake.fail(429, **{"Retry-After": "1"})
    fake.fail(503)
    with pytest.raises(errors.NotFound):  # the fake has no keys route: the fourth attempt got through
        make_client().create_key("agent", ["ns1"])
    assert len(fake.calls) == 4
    assert sleeps[1] == 1.0


def test_unindexed_steps_are_retried_only_when_surely_unsent(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    client = make_client()
    trajectory = client.create_trajectory(task="t")
    fake.fail(504)
    with pytest.raises(errors.Unavailable):
        client.append_steps(None, trajectory.id, [STEP])
    fake.fail(504)
    appended = client.append_steps(None, trajectory.id, [dict(STEP, index=0)])
    assert appended.appended == 1


def test_health_probes_report_the_first_answer(fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]) -> None:
    fake.fail(503)
    with pytest.raises(errors.Unavailable):
        make_client().readyz()
    assert len(fake.calls) == 1


@pytest.mark.anyio
async def test_async_client_retries_the_same_way(fake: FakeReflexa, sleeps: list[float]) -> None:
    fake.fail(429, **{"Retry-After": "1"})
    fake.raise_(httpx.ConnectError("refused"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake))
    async with http, AsyncClient(BASE_URL, "k", namespace="ns1", backoff=0.001, http_client=http) as client:
        written = await client.create_trajectory(task="t", steps=[STEP])
    assert written.step_count == 1
    assert len(fake.calls) == 3
    assert sleeps[0] == 1.0
