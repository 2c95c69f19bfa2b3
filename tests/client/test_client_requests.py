"""What the client sends (routes, headers, bodies, query strings), what it refuses to
send, and how it reads answers — checked against recorded requests, no server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fake_reflexa import BASE_URL, NOW, FakeReflexa, MakeClient
from reflexa import AsyncClient, Client, errors
from reflexa.models import Outcome, State, Step

STEP = {"state": {"observation": "o"}, "action": "a"}


def _json(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


def test_requests_carry_the_bearer_key_and_a_user_agent(fake: FakeReflexa, make_client: MakeClient) -> None:
    make_client(api_key="rfx_secret").create_trajectory(task="t")
    headers = fake.calls[0].headers
    assert headers["authorization"] == "Bearer rfx_secret"
    assert headers["user-agent"].startswith("reflexa-python/")


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFLEXA_URL", "http://elsewhere:9000/")
    monkeypatch.setenv("REFLEXA_API_KEY", "rfx_env")
    monkeypatch.setenv("REFLEXA_NAMESPACE", "envns")
    with Client() as client:
        assert (client.config.base_url, client.config.api_key) == ("http://elsewhere:9000", "rfx_env")
        assert client.config.namespace == "envns"
    monkeypatch.delenv("REFLEXA_URL")
    with Client(api_key="explicit") as client:
        assert client.config.base_url == "http://127.0.0.1:8080"
        assert client.config.api_key == "explicit"


def test_a_namespace_is_required_somewhere(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFLEXA_NAMESPACE", raising=False)
    with pytest.raises(ValueError, match="namespace"):
        make_client(namespace=None).create_trajectory(task="t")


def test_models_and_dicts_are_accepted_alike(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    as_model = Step(state=State(observation="o", data={"x": 1}), action={"tool": "ls"}, reward=0.5)
    as_dict = {"state": {"observation": "o", "data": {"x": 1}}, "action": {"tool": "ls"}, "reward": 0.5}
    client.create_trajectory("other", task="t", id="a", steps=[as_model], outcome=Outcome(success=True))
    client.create_trajectory("other", task="t", id="b", steps=[as_dict], outcome={"success": True})
    first, second = (call.body for call in fake.calls)
    assert fake.calls[0].path == "/v1/namespaces/other/trajectories"
    assert {**first, "id": "b"} == second
    assert first["steps"] == [{**as_dict, "done": False, "truncated": False, "caused_failure": False}]
    assert "environment" not in first  # unset optionals are left out, not sent as null


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([{"state": {"observation": 3}, "action": "a"}], "steps[0].state.observation"),
        ([STEP, {"state": {"observation": "o"}}], "steps[1].action"),
        ([{**STEP, "acton": "typo"}], "steps[0].acton"),
        ([{**STEP, "reward": float("nan")}], "steps[0].reward"),
    ],
)
def test_invalid_input_is_refused_before_sending_naming_the_field(
    fake: FakeReflexa, make_client: MakeClient, steps: list[dict[str, Any]], field: str
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        make_client().create_trajectory(task="t", steps=steps)
    assert caught.value.field == field
    assert fake.calls == []


GROUP = {"group_id": "g", "trajectories": [{"id": "a", "reward": 1.0}]}


@pytest.mark.parametrize(
    ("call", "field", "kind"),
    [
        (lambda c: c.distill_contexts(None, "t1"), "trajectories", "str"),
        (lambda c: c.distill_contexts(None, ["t1"], {"kind": "memory"}), "teachers", "dict"),
        (lambda c: c.distill_prefixes(None, step=0, schedule={}, tasks="a task"), "tasks", "str"),
        (lambda c: c.distill_prefixes(None, step=0, schedule={}, trajectories={"id": "t1"}), "trajectories", "dict"),
        (lambda c: c.teacher_logprobs(None, {"continuation": "x"}), "items", "dict"),
        (lambda c: c.distill_advantages("grpo", GROUP), "groups", "dict"),
        (lambda c: c.distill_advantages_arrays("grpo", GROUP), "groups", "dict"),
        (lambda c: c.distill_advantages_batched("grpo", GROUP), "groups", "dict"),
        (lambda c: c.score_rubric_batch(None, "r", {"trajectory_id": "t1"}), "items", "dict"),
    ],
)
def test_a_lone_item_where_a_list_belongs_is_refused(
    fake: FakeReflexa, make_client: MakeClient, call: Callable[[Client], Any], field: str, kind: str
) -> None:
    with pytest.raises(errors.InvalidInput, match=f"{field} must be a list, not one {kind}") as caught:
        call(make_client())
    assert caught.value.field == field
    assert fake.calls == []


def test_batch_items_are_named_by_position_and_get_ids(fake: FakeReflexa, make_client: MakeClient) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        make_client().create_trajectories(None, [{"task": "ok"}, {"task": "t", "steps": [{"action": "a"}]}])
    assert caught.value.field == "trajectories[1].steps[0].state"

    def batch(request: httpx.Request) -> httpx.Response:
        fake(request)
        items = [
            {"id": t["id"], "created": i == 0, "step_count": 0, "status": "open"}
            for i, t in enumerate(fake.calls[-1].body["trajectories"])
        ]
        return _json(201, {"items": items, "consistency_token": "c1.0"})

    result = make_client(batch).create_trajectories(None, [{"task": "a"}, {"task": "b", "id": "mine"}])
    sent = fake.calls[-1].body["trajectories"]
    assert fake.calls[-1].path == "/v1/namespaces/ns1/trajectories/batch"
    assert len(sent[0]["id"]) == 32 and sent[1]["id"] == "mine"
    assert (result.created, result.replayed) == (1, 1)


def test_list_filters_become_query_parameters(fake: FakeReflexa, make_client: MakeClient) -> None:
    def empty(request: httpx.Request) -> httpx.Response:
        fake(request)
        return _json(200, {"items": [], "next_cursor": None})

    make_client(empty).list_trajectories(
        "ns2", limit=10, agent="bot", status="closed", success=False, include_steps=True
    )
    call = fake.calls[0]
    assert call.path == "/v1/namespaces/ns2/trajectories"
    assert call.params == {
        "limit": "10",
        "agent": "bot",
        "status": "closed",
        "success": "false",
        "include_steps": "true",
    }


def _trajectory(trajectory_id: str) -> dict[str, Any]:
    return {
        "id": trajectory_id,
        "namespace": "ns1",
        "task": "t",
        "status": "open",
        "step_count": 0,
        "created_at": NOW,
        "updated_at": NOW,
        "a_field_from_a_newer_server": {"ignored": True},
    }


def test_iter_trajectories_follows_the_cursor(fake: FakeReflexa, make_client: MakeClient) -> None:
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], "c2"), "c2": ([], None)}

    def paged(request: httpx.Request) -> httpx.Response:
        fake(request)
        ids, next_cursor = pages[request.url.params.get("cursor")]
        return _json(200, {"items": [_trajectory(i) for i in ids], "next_cursor": next_cursor})

    found = [t.id for t in make_client(paged).iter_trajectories(page_size=2, group_id="g")]
    assert found == ["a", "b", "c"]
    assert [c.params.get("cursor") for c in fake.calls] == [None, "c1", "c2"]
    assert all(c.params["group_id"] == "g" and c.params["limit"] == "2" for c in fake.calls)


def test_ids_are_escaped_into_the_path(fake: FakeReflexa, make_client: MakeClient) -> None:
    with pytest.raises(errors.NotFound):
        make_client().get_trajectory(None, "a/../b")
    assert fake.calls[0].path == "/v1/namespaces/ns1/trajectories/a%2F..%2Fb"


def test_append_outcome_get_delete_round_trip(fake: FakeReflexa, make_client: MakeClient) -> None:
    client = make_client()
    written = client.create_trajectory(task="t", id="t1", steps=[STEP])
    assert (written.id, written.status, written.consistency_token) == ("t1", "open", "c1.0")
    appended = client.append_steps(None, "t1", [dict(STEP, index=1), dict(STEP, index=2)])
    assert (appended.step_count, appended.appended) == (3, 2)
    closed = client.report_outcome(None, "t1", success=True, reward=1.0)
    assert closed.status == "closed" and closed.outcome and closed.outcome.reward == 1.0
    assert fake.calls[-1].body == {"success": True, "reward": 1.0}
    got = client.get_trajectory(None, "t1")
    assert [s.index for s in got.steps or []] == [0, 1, 2]

    def deleted(request: httpx.Request) -> httpx.Response:
        fake(request)
        return _json(200, {"id": "t1", "deleted_steps": 3, "deleted_reflections": 0})

    assert make_client(deleted).delete_trajectory(None, "t1").deleted_steps == 3
    assert fake.calls[-1].method == "DELETE"


def test_namespaces_and_keys(fake: FakeReflexa, make_client: MakeClient) -> None:
    def admin(request: httpx.Request) -> httpx.Response:
        fake(request)
        if request.url.path == "/v1/keys":
            return _json(201, {"id": "k1", "key": "rfx_new", "role": "agent", "namespaces": ["ns1"], "created_at": NOW})
        namespace = {"name": "ns1", "settings": {"gamma": 0.9}, "created_at": NOW}
        if request.method == "POST":
            return _json(201, namespace)
        return _json(200, {"items": [namespace], "next_cursor": None})

    client = make_client(admin)
    assert client.create_namespace("ns1", {"gamma": 0.9}).settings.gamma == 0.9
    assert fake.calls[-1].body == {"name": "ns1", "settings": {"gamma": 0.9}}
    assert [n.name for n in client.list_namespaces()] == ["ns1"]
    key = client.create_key("agent", ["ns1"], description="bot")
    assert key.key == "rfx_new"
    assert fake.calls[-1].body == {"role": "agent", "namespaces": ["ns1"], "description": "bot"}
    with pytest.raises(errors.InvalidInput):
        client.create_namespace("Bad Name")


def test_a_2xx_that_is_not_ours_is_an_invalid_response(make_client: MakeClient) -> None:
    client = make_client(lambda request: httpx.Response(200, text="<html>hello</html>"))
    with pytest.raises(errors.InvalidResponse):
        client.get_trajectory(None, "t1")


@pytest.mark.anyio
async def test_async_client_mirrors_the_sync_one(fake: FakeReflexa) -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake))
    async with http, AsyncClient(BASE_URL, "rfx_a", namespace="ns1", http_client=http) as client:
        await client.create_trajectory(task="t", id="t1", steps=[STEP])
        await client.append_steps(None, "t1", [dict(STEP, index=1)])
        await client.report_outcome(None, "t1", success=False, failure_reason="timeout")
        got = await client.get_trajectory(None, "t1")
        with pytest.raises(errors.Conflict):
            await client.report_outcome(None, "t1", success=True)
    assert got.step_count == 2 and got.status == "closed"
    assert fake.calls[0].headers["authorization"] == "Bearer rfx_a"
