"""The episode logger: batching and order, never blocking, bounded memory, flushing on
exit, and losses that are counted and reported instead of silent."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from fake_reflexa import FakeReflexa, MakeClient
from reflexa import EpisodeDeliveryError, _delivery, errors


@pytest.fixture(autouse=True)
def quick_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender's pause between delivery attempts, shortened for tests."""
    monkeypatch.setattr(_delivery, "_FIRST_PAUSE", 0.01)


def wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def stored_indexes(fake: FakeReflexa, trajectory_id: str) -> list[int]:
    return [step["index"] for step in fake.trajectories[trajectory_id]["steps"]]


def test_steps_go_in_batches_create_first_outcome_last(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t", agent="bot", batch_size=50, flush_interval=60) as ep:
        for i in range(120):
            assert ep.step(f"obs {i}", "act") == i
        ep.finish(success=True, reward=1.0)
    assert fake.paths() == [
        "POST /v1/namespaces/ns1/trajectories",
        f"POST /v1/namespaces/ns1/trajectories/{ep.id}/steps",
        f"POST /v1/namespaces/ns1/trajectories/{ep.id}/steps",
        f"POST /v1/namespaces/ns1/trajectories/{ep.id}/outcome",
    ]
    create, first_append, second_append, outcome = (call.body for call in fake.calls)
    assert create["id"] == ep.id and create["agent"] == "bot" and "outcome" not in create
    assert [s["index"] for s in create["steps"]] == list(range(50))
    assert [s["index"] for s in first_append["steps"]] == list(range(50, 100))
    assert [s["index"] for s in second_append["steps"]] == list(range(100, 120))
    assert outcome == {"success": True, "reward": 1.0}
    assert stored_indexes(fake, ep.id) == list(range(120))
    stats = ep.stats
    assert (stats.accepted, stats.sent, stats.failed, stats.dropped, stats.outcome) == (
        120,
        120,
        0,
        0,
        "sent",
    )
    assert stats.delivered


def test_a_short_episode_is_a_single_request(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t", flush_interval=60) as ep:
        for i in range(5):
            ep.step(f"obs {i}", {"tool": "click", "x": i}, reward=0.1, metadata={"i": i})
        ep.finish(success=False, failure_reason="timeout")
    assert len(fake.calls) == 1
    body = fake.calls[0].body
    assert len(body["steps"]) == 5 and body["outcome"] == {"success": False, "failure_reason": "timeout"}
    assert fake.trajectories[ep.id]["outcome"] is not None


def test_time_flushes_a_partial_batch(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t", batch_size=50, flush_interval=0.05) as ep:
        for i in range(3):
            ep.step(f"obs {i}", "act")
        wait_until(lambda: ep.stats.sent == 3)
        assert [s["index"] for s in fake.calls[0].body["steps"]] == [0, 1, 2]
        ep.step("obs 3", "act")
    assert stored_indexes(fake, ep.id) == [0, 1, 2, 3]


def test_close_flushes_the_rest_and_leaves_it_open_without_an_outcome(
    fake: FakeReflexa, make_client: MakeClient
) -> None:
    ep = make_client().episode(task="t", flush_interval=60)
    for i in range(10):
        ep.step(f"obs {i}", "act")
    stats = ep.close()
    assert stats.delivered and stats.sent == 10 and stats.outcome == "none"
    assert fake.trajectories[ep.id]["outcome"] is None
    assert ep.close() == stats  # idempotent
    with pytest.raises(RuntimeError):
        ep.step("late", "act")


def test_an_exception_in_the_block_flushes_steps_but_sends_no_outcome(
    fake: FakeReflexa, make_client: MakeClient
) -> None:
    with pytest.raises(KeyError), make_client().episode(task="t", strict=True) as ep:
        ep.step("obs", "act")
        raise KeyError("agent crashed")
    assert stored_indexes(fake, ep.id) == [0]
    assert fake.trajectories[ep.id]["outcome"] is None


def test_an_empty_episode_still_creates_its_trajectory(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t") as ep:
        ep.finish(success=True)
    assert fake.calls[0].body["steps"] == [] and fake.calls[0].body["outcome"] == {"success": True}


def test_step_never_blocks_and_overflow_is_counted_as_dropped(
    fake: FakeReflexa, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    fake.hang()
    reported: list[errors.ReflexaError] = []
    ep = make_client(timeout=60).episode(task="t", max_buffered_steps=1000, flush_timeout=0.2, on_error=reported.append)
    try:
        results = [ep.step("obs", "act") for _ in range(100_000)]
        # The loop finished while the very first request was still hanging.
        assert fake.calls == []
        assert results[:1000] == list(range(1000))
        assert results[1000:] == [None] * 99_000
        with caplog.at_level(logging.WARNING, logger="reflexa.episode"):
            stats = ep.close()
    finally:
        fake.release()
    assert (stats.accepted, stats.dropped, stats.failed, stats.pending) == (1000, 99_000, 1000, 0)
    assert not stats.delivered
    assert stats.last_error is not None and stats.last_error.type == "flush_timeout"
    assert "99000 steps dropped" in caplog.text
    assert len(reported) == 1 and isinstance(reported[0], EpisodeDeliveryError)


def test_strict_mode_raises_when_something_was_lost(fake: FakeReflexa, make_client: MakeClient) -> None:
    fake.hang()
    try:
        with pytest.raises(EpisodeDeliveryError) as caught:  # noqa: SIM117 - the raise comes from __exit__
            with make_client().episode(task="t", strict=True, max_buffered_steps=2, flush_timeout=0.1) as ep:
                for _ in range(5):
                    ep.step("obs", "act")
    finally:
        fake.release()
    assert caught.value.stats.dropped == 3
    assert caught.value.stats.failed == 2


def test_transient_failures_are_retried_until_stored(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    fake.fail(503, times=6)
    with make_client(max_retries=1).episode(task="t", strict=True) as ep:
        for i in range(3):
            ep.step(f"obs {i}", "act")
        ep.finish(success=True)
    assert len(fake.calls) == 7
    assert len({call.body["id"] for call in fake.calls}) == 1  # every attempt the same request
    assert stored_indexes(fake, ep.id) == [0, 1, 2]
    assert ep.stats.delivered


def test_a_permanent_failure_stops_sending_and_is_reported(
    fake: FakeReflexa, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail(404)
    reported: list[errors.ReflexaError] = []
    ep = make_client().episode(task="t", flush_interval=0.01, on_error=reported.append)
    ep.step("obs 0", "act")
    wait_until(lambda: ep.stats.failed == 1)
    assert ep.step("obs 1", "act") == 1  # still never raises; counted as failed
    ep.finish(success=True)
    with caplog.at_level(logging.WARNING, logger="reflexa.episode"):
        stats = ep.close()
    assert (stats.accepted, stats.sent, stats.failed, stats.outcome) == (2, 0, 2, "failed")
    assert isinstance(stats.last_error, errors.NotFound)
    assert len(reported) == 1 and isinstance(reported[0], errors.NotFound)
    assert len(fake.calls) == 1
    assert "2 not delivered" in caplog.text


def test_invalid_steps_raise_in_the_caller_without_using_an_index(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t") as ep:
        with pytest.raises(errors.InvalidInput) as caught:
            ep.step(42, "act")  # type: ignore[arg-type]
        assert caught.value.field == "state.observation"
        with pytest.raises(errors.InvalidInput):
            ep.step("obs", "act", metadata={"not json": object()})
        for rollout in (
            {"rollout_logprobs": [-1.0, 0.5]},  # a log-prob is <= 0
            {"rollout_token_ids": [-1]},
            {"rollout_logprobs": [-1.0], "rollout_token_ids": [1, 2]},  # one id per log-prob
            {"rollout_logprobs": [float("nan")]},
            {"policy_version": ""},
        ):
            with pytest.raises(errors.InvalidInput):
                ep.step("obs", "act", **rollout)  # type: ignore[arg-type]
        assert ep.step("obs", "act") == 0
        ep.finish(success=True)
        with pytest.raises(RuntimeError):
            ep.finish(success=False)
        with pytest.raises(RuntimeError):
            ep.step("after the outcome", "act")


def test_steps_are_copied_when_taken(fake: FakeReflexa, make_client: MakeClient) -> None:
    data = {"position": [0, 0]}
    with make_client().episode(task="t", flush_interval=60) as ep:
        ep.step("obs", "act", state_data=data)
        data["position"][0] = 99
    assert fake.trajectories[ep.id]["steps"][0]["state"]["data"] == {"position": [0, 0]}


def test_steps_from_many_threads_get_contiguous_indexes(fake: FakeReflexa, make_client: MakeClient) -> None:
    with make_client().episode(task="t", batch_size=37, flush_interval=0.01) as ep:
        threads = [threading.Thread(target=lambda: [ep.step("obs", "act") for _ in range(250)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert stored_indexes(fake, ep.id) == list(range(1000))


@pytest.mark.anyio
async def test_the_logger_works_from_asyncio_code(fake: FakeReflexa, make_client: MakeClient) -> None:
    async with make_client().episode(task="t", batch_size=10) as ep:
        for i in range(25):
            ep.step(f"obs {i}", "act")
            await asyncio.sleep(0)
        ep.finish(success=True)
    assert stored_indexes(fake, ep.id) == list(range(25))
    assert fake.trajectories[ep.id]["outcome"] == {"success": True}
