"""Retrieval from the client: what retrieve sends, the read-your-writes session
(tokens of the client's own writes, merged, sent, and cleared only for what a
successful retrieve waited for), consistency timeouts, retrieval outcomes, and the
episode's retrieve and wait_searchable_ms — against the fake, no server."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from fake_reflexa import BASE_URL, FakeReflexa, MakeClient
from reflexa import AsyncClient, ConsistencyTimeout, _consistency, _delivery, errors, merge_tokens
from reflexa._consistency import ConsistencySession
from reflexa.errors import error_from_response
from reflexa.models import RenderOptions, RetrieveFilters


@pytest.fixture(autouse=True)
def quick_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_delivery, "_FIRST_PAUSE", 0.01)


def timeout_response(rule: str = "wait_timeout") -> httpx.Response:
    error = {"type": "consistency_timeout", "message": "not searchable within 5000 ms", "rule": rule}
    return httpx.Response(504, json={"error": {**error, "field": "consistency_token"}})


def retrieves(fake: FakeReflexa) -> list[dict[str, Any]]:
    return [call.body for call in fake.calls if call.path.endswith("/retrieve")]


# --- tokens -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "merged"),
    [
        ((), None),
        ((None, "c1.0"), None),
        (("c1.0", "c1.12.15"), "c1.12.15"),
        (("c1.12.15", "c1.0"), "c1.12.15"),
        (("c1.12.15", "c1.3.4"), "c1.3.15"),
        (("c1.3.20", "c1.12.15"), "c1.3.20"),
        (("c1.1.1", None, "c1.7.9", "c1.2.2"), "c1.1.9"),
        (("c1.12.15", "c2.opaque"), "c2.opaque"),  # cannot be combined: the newer is kept
        (("c2.opaque", "c1.5.5"), "c1.5.5"),
    ],
)
def test_tokens_merge_into_the_range_that_covers_them(tokens: tuple[str | None, ...], merged: str | None) -> None:
    assert merge_tokens(*tokens) == merged


def test_the_session_keeps_newer_writes_when_settling_older_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    session = ConsistencySession()
    assert session.pending("ns") == (None, 0)
    session.record("ns", "c1.0")  # nothing to wait for
    assert session.pending("ns") == (None, 0)
    session.record("ns", "c1.4.4")
    session.record("other", "c1.5.5")
    session.record("ns", "c1.6.7")
    token, mark = session.pending("ns")
    assert token == "c1.4.7"
    session.record("ns", "c1.9.9")  # arrives while a retrieve with `token` is on its way
    session.settle("ns", mark)
    assert session.pending("ns")[0] == "c1.9.9"
    assert session.pending("other")[0] == "c1.5.5"

    monkeypatch.setattr(_consistency, "_MAX_ENTRIES", 4)
    for job in range(10, 20):
        session.record("ns", f"c1.{job}.{job}")
    token, mark = session.pending("ns")
    assert token == "c1.9.19"  # compaction merges the oldest, never loses one
    session.settle("ns", mark)
    assert session.pending("ns") == (None, 0)


# --- what retrieve sends ----------------------------------------------------------------------


def test_retrieve_sends_the_request_and_reads_the_answer(fake: FakeReflexa, make_client: MakeClient) -> None:
    result = make_client().retrieve(
        None,
        "a red door",
        data={"room": 3},
        internal_state="find the key",
        task="escape",
        environment="house",
        kinds=["exemplar"],
        k=3,
        min_score=0.1,
        mmr_lambda=0.5,
        filters={"agent": "bot", "exclude_tasks": ["escape"], "status": ["active", "candidate"]},
        render="markdown",
    )
    call = fake.calls[0]
    assert (call.method, call.path) == ("POST", "/v1/namespaces/ns1/retrieve")
    assert call.body == {
        "state": {"observation": "a red door", "data": {"room": 3}},
        "internal_state": "find the key",
        "task": "escape",
        "environment": "house",
        "kinds": ["exemplar"],
        "k": 3,
        "min_score": 0.1,
        "mmr_lambda": 0.5,
        "filters": {"agent": "bot", "exclude_tasks": ["escape"], "status": ["active", "candidate"]},
        "render": {"format": "markdown", "max_chars": 4000},
    }
    assert result.retrieval_id == "r_1" and result.context and result.waited_ms == 0
    item = result.items[0]
    assert (item.kind, item.utility.uses, item.evidence[0].trajectory_id) == ("exemplar", 0, "t0")


def test_defaults_are_left_to_the_server(fake: FakeReflexa, make_client: MakeClient) -> None:
    make_client().retrieve("other", "obs")
    assert fake.calls[0].path == "/v1/namespaces/other/retrieve"
    assert fake.calls[0].body == {"state": {"observation": "obs"}, "k": 10}


def test_render_and_filters_may_be_models(fake: FakeReflexa, make_client: MakeClient) -> None:
    make_client().retrieve(
        None,
        "obs",
        render=RenderOptions(format="json", max_chars=500),
        filters=RetrieveFilters(exclude_trajectory_ids=["t1"]),
    )
    body = fake.calls[0].body
    assert body["render"] == {"format": "json", "max_chars": 500}
    assert body["filters"] == {"exclude_trajectory_ids": ["t1"]}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"render": "html"}, "render.format"),
        ({"render": {"format": "text", "max_chars": 10}}, "render.max_chars"),
        ({"filters": {"exclude_task": ["t"]}}, "filters.exclude_task"),
        ({"filters": {"status": ["gone"]}}, "filters.status[0]"),
        ({"kinds": ["exemplars"]}, "kinds[0]"),
        ({"k": 0}, "k"),
        ({"mmr_lambda": 2.0}, "mmr_lambda"),
        ({"data": "not an object"}, "state.data"),
        ({"trajectory_id": "bad id"}, "trajectory_id"),
        ({"consistency": ""}, "consistency"),
    ],
)
def test_bad_retrieve_arguments_are_refused_before_sending(
    fake: FakeReflexa, make_client: MakeClient, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        make_client().retrieve(None, "obs", **kwargs)
    assert caught.value.field == field
    assert fake.calls == []


def test_a_token_lengthens_the_read_timeout_by_the_wait(fake: FakeReflexa, make_client: MakeClient) -> None:
    timeouts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        return fake(request)

    client = make_client(handler, timeout=30)
    client.retrieve(None, "obs")
    client.retrieve(None, "obs", consistency="c1.3.4", wait_timeout_ms=20_000)
    client.report_outcome(None, client.create_trajectory(task="t").id, success=True, wait_ms=2000)
    assert timeouts == [30, 50, 30, 32]


# --- the read-your-writes session -------------------------------------------------------------


def test_own_writes_are_waited_for_once(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    client.create_trajectory(task="t", steps=[{"state": {"observation": "o"}, "action": "a"}])  # open: c1.0
    assert client.session_token() is None
    client.create_trajectory(task="t", outcome={"success": True})  # job 1
    opened = client.create_trajectory(task="t")
    client.append_steps(None, opened.id, [{"index": 0, "state": {"observation": "o"}, "action": "a"}])
    client.report_outcome(None, opened.id, success=False)  # job 2
    client.create_trajectories(None, [{"task": "t", "outcome": {"reward": 1.0}}])  # job 3
    assert client.session_token() == "c1.1.3"
    assert client.session_token("other") is None

    client.retrieve(None, "obs")
    client.retrieve(None, "obs")
    first, second = retrieves(fake)
    assert (first["consistency_token"], first["wait_timeout_ms"]) == ("c1.1.3", 5000)
    assert "consistency_token" not in second and "wait_timeout_ms" not in second
    assert client.session_token() is None


def test_a_write_during_the_retrieve_stays_pending(fake: FakeReflexa, make_client: MakeClient) -> None:
    written_meanwhile: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.url.path.endswith("/retrieve") and not written_meanwhile:
            # Another thread (say, an episode's sender) writes while the retrieve is answered.
            def write() -> None:
                written_meanwhile.append(client.create_trajectory(task="t", outcome={}).consistency_token)

            other = threading.Thread(target=write)
            other.start()
            other.join()
        return response

    client = make_client(handler)
    client.create_trajectory(task="t", outcome={"success": True})  # job 1
    client.retrieve(None, "obs")
    assert written_meanwhile == ["c1.2.2"]
    assert client.session_token() == "c1.2.2"  # not cleared: the retrieve did not wait for it
    client.retrieve(None, "obs")
    client.retrieve(None, "obs")
    assert [body.get("consistency_token") for body in retrieves(fake)] == ["c1.1.1", "c1.2.2", None]


def test_consistency_none_and_explicit_tokens_leave_the_session_alone(
    fake: FakeReflexa, make_client: MakeClient
) -> None:
    client = make_client()
    client.create_trajectory(task="t", outcome={"success": True})
    client.retrieve(None, "obs", consistency="none")
    client.retrieve(None, "obs", consistency="c1.40.41", wait_timeout_ms=100)
    assert client.session_token() == "c1.1.1"
    sent = retrieves(fake)
    assert "consistency_token" not in sent[0]
    assert (sent[1]["consistency_token"], sent[1]["wait_timeout_ms"]) == ("c1.40.41", 100)


def test_sessions_are_per_namespace(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    client.create_trajectory("a", task="t", outcome={"success": True})
    client.create_trajectory("b", task="t", outcome={"success": True})
    client.retrieve("a", "obs")
    assert retrieves(fake)[0]["consistency_token"] == "c1.1.1"
    assert (client.session_token("a"), client.session_token("b")) == (None, "c1.2.2")


def test_failed_writes_and_replays(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    written = client.create_trajectory(task="t", id="t1", outcome={"success": True})
    client.retrieve(None, "obs")
    assert client.create_trajectory(task="t", id="t1", outcome={"success": True}) == written  # replay
    assert client.session_token() == "c1.1.1"  # waiting again for a replay is harmless
    with pytest.raises(errors.Conflict):
        client.create_trajectory(task="other", id="t1")
    assert client.session_token() == "c1.1.1"


# --- consistency timeouts ---------------------------------------------------------------------


def test_consistency_timeout_maps_to_its_own_error() -> None:
    error = error_from_response(timeout_response())
    assert type(error) is ConsistencyTimeout and isinstance(error, errors.ReflexaError)
    assert (error.status, error.type, error.rule) == (504, "consistency_timeout", "wait_timeout")
    # A 504 that is not ours (a gateway's) is still a transient Unavailable.
    assert type(error_from_response(httpx.Response(504, text="gateway timeout"))) is errors.Unavailable


def test_a_consistency_timeout_is_not_retried_and_the_token_stays(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    client = make_client()
    client.create_trajectory(task="t", outcome={"success": True})
    fake.script.append(timeout_response())
    with pytest.raises(ConsistencyTimeout):
        client.retrieve(None, "obs")
    assert len(retrieves(fake)) == 1 and sleeps == []
    assert client.session_token() == "c1.1.1"  # the next retrieve waits again
    client.retrieve(None, "obs")
    assert retrieves(fake)[1]["consistency_token"] == "c1.1.1"
    assert client.session_token() is None


def test_failed_indexing_is_reported_once_then_forgotten(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    client.create_trajectory(task="t", outcome={"success": True})
    fake.script.append(timeout_response("indexing_failed"))
    with pytest.raises(ConsistencyTimeout) as caught:
        client.retrieve(None, "obs")
    assert caught.value.rule == "indexing_failed"
    assert client.session_token() is None  # no wait can fix it; later retrieves must not fail on it


def test_an_outcome_that_timed_out_waiting_still_joins_the_session(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    client = make_client()
    opened = client.create_trajectory(task="t", id="t1")
    fake.script.append(timeout_response())
    with pytest.raises(ConsistencyTimeout):
        client.report_outcome(None, opened.id, success=True, wait_ms=1500)
    # The 504 carried no token: an identical repeat without the wait fetched it.
    outcomes = [call for call in fake.calls if call.path.endswith("/outcome")]
    assert [call.params for call in outcomes] == [{"wait_ms": "1500"}, {}]
    assert outcomes[0].body == outcomes[1].body == {"success": True}
    assert client.session_token() == "c1.1.1" and sleeps == []


def test_wait_ms_must_be_a_whole_number(fake: FakeReflexa, make_client: MakeClient) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        make_client().report_outcome(None, "t1", success=True, wait_ms=-1)
    assert caught.value.field == "wait_ms" and fake.calls == []


def test_a_retrieve_tied_to_an_episode_is_not_repeated_when_it_may_have_been_served(
    fake: FakeReflexa, make_client: MakeClient, sleeps: list[float]
) -> None:
    client = make_client()
    fake.fail(502)
    with pytest.raises(errors.Unavailable):
        client.retrieve(None, "obs", trajectory_id="t1")  # a repeat would be credited twice
    fake.fail(502)
    client.retrieve(None, "obs")  # nothing credits an unreported retrieve: retried
    assert len(retrieves(fake)) == 3


# --- retrieval outcomes -----------------------------------------------------------------------


def test_retrieval_outcome_replay_and_conflict(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    rid = client.retrieve(None, "obs").retrieval_id
    first = client.report_retrieval_outcome(None, rid, success=True, reward=1.0, details={"turns": 3})
    call = fake.calls[-1]
    assert (call.path, call.body) == (
        f"/v1/namespaces/ns1/retrievals/{rid}/outcome",
        {"success": True, "reward": 1.0, "details": {"turns": 3}},
    )
    assert (first.retrieval_id, first.success, first.credited_items) == (rid, True, 1)
    again = client.report_retrieval_outcome(None, rid, success=True, reward=1.0, details={"turns": 3})
    assert again.credited_items == 0
    with pytest.raises(errors.Conflict):
        client.report_retrieval_outcome(None, rid, success=False)
    with pytest.raises(errors.NotFound):
        client.report_retrieval_outcome(None, "r_unknown", success=True)
    with pytest.raises(errors.InvalidInput) as caught:
        client.report_retrieval_outcome(None, rid, reward=float("nan"))
    assert caught.value.field == "reward"


# --- the episode --------------------------------------------------------------------------------


def test_episode_retrieve_is_tied_to_the_episode(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    with client.episode(task="escape", environment="house") as ep:
        ep.step("a hall", "go north")
        first = ep.retrieve("a hall", internal_state="find the key", render="text")
        second = ep.retrieve("a cellar", task="other task", environment="cellar", k=2)
        ep.finish(success=True)
    sent = retrieves(fake)
    assert sent[0] == {
        "state": {"observation": "a hall"},
        "internal_state": "find the key",
        "task": "escape",
        "environment": "house",
        "k": 10,
        "render": {"format": "text", "max_chars": 4000},
        "trajectory_id": ep.id,
        "step": 1,  # the step recorded next: the one taken with this answer
    }
    assert (sent[1]["task"], sent[1]["environment"], sent[1]["k"], sent[1]["trajectory_id"], sent[1]["step"]) == (
        "other task",
        "cellar",
        2,
        ep.id,
        1,
    )
    assert ep.retrieval_ids == [first.retrieval_id, second.retrieval_id]


def test_an_episode_retrieve_does_not_wait_for_its_own_steps(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    with client.episode(task="t", flush_interval=60, batch_size=1000) as ep:
        ep.step("o", "a")
        ep.retrieve("o")
        assert fake.paths() == ["POST /v1/namespaces/ns1/retrieve"]  # the step is still queued
        ep.finish(success=True)
    assert "consistency_token" not in retrieves(fake)[0]


def test_a_finished_episode_is_waited_for_by_the_next_retrieve(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    with client.episode(task="t") as ep:
        ep.step("o", "a")
        ep.finish(success=True)
    assert [call.path for call in fake.calls] == ["/v1/namespaces/ns1/trajectories"]  # one request
    assert client.session_token() == "c1.1.1"
    client.retrieve(None, "o")
    assert retrieves(fake)[0]["consistency_token"] == "c1.1.1"


def test_wait_searchable_sends_the_outcome_with_wait_ms(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    with client.episode(task="t", wait_searchable_ms=3000, flush_timeout=10) as ep:
        ep.step("o", "a")
        ep.finish(success=True)
    create, outcome = fake.calls
    assert "outcome" not in create.body  # not folded into the create: only the outcome route waits
    assert (outcome.path, outcome.params, outcome.body) == (
        f"/v1/namespaces/ns1/trajectories/{ep.id}/outcome",
        {"wait_ms": "3000"},
        {"success": True},
    )
    assert ep.stats.delivered and client.session_token() == "c1.1.1"


def test_wait_searchable_stays_within_the_flush_timeout(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    with client.episode(task="t", wait_searchable_ms=60_000, flush_timeout=2) as ep:
        ep.finish(success=False)
    outcome = fake.calls[-1]
    assert 0 < int(outcome.params["wait_ms"]) <= 2000
    assert ep.stats.delivered


def test_an_episode_stored_but_not_yet_searchable_counts_as_delivered(
    fake: FakeReflexa, make_client: MakeClient
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)  # the server stores the outcome, then waits
        if request.url.path.endswith("/outcome") and "wait_ms" in request.url.params:
            return timeout_response()
        return response

    client = make_client(handler)
    with client.episode(task="t", wait_searchable_ms=1000, strict=True) as ep:
        ep.step("o", "a")
        ep.finish(success=True)
    assert [(call.path.rsplit("/", 1)[-1], call.params) for call in fake.calls] == [
        ("trajectories", {}),
        ("outcome", {"wait_ms": "1000"}),
        ("outcome", {}),  # the replay that fetches the token the 504 did not carry
    ]
    stats = ep.stats
    assert stats.delivered and stats.outcome == "sent" and isinstance(stats.last_error, ConsistencyTimeout)
    assert client.session_token() == "c1.1.1"


@pytest.mark.anyio
async def test_async_retrieve_uses_its_own_session(fake: FakeReflexa) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return fake(request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with AsyncClient(BASE_URL, "rfx_test", namespace="ns1", http_client=http) as client:
        await client.create_trajectory(task="t", outcome={"success": True})
        first = await client.retrieve(None, "obs", render="json")
        await client.retrieve(None, "obs")
        rid = first.retrieval_id
        assert (await client.report_retrieval_outcome(None, rid, success=True)).credited_items == 1
    await http.aclose()
    assert [body.get("consistency_token") for body in retrieves(fake)] == ["c1.1.1", None]
    assert retrieves(fake)[0]["render"] == {"format": "json", "max_chars": 4000}
