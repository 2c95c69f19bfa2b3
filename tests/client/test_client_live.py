"""The client against a real server (``live_server``: uvicorn over HTTP on SQLite).

Every test works in a namespace of its own, so they share one server safely.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from reflexa import AsyncClient, Client, cli, errors, models
from reflexa import _operations as operations
from reflexa._operations import TrajectoryFilters

from tests.conftest import start_server, start_worker
from tests.factories import unique

STEP = {"state": {"observation": "a room with a door"}, "action": "open door", "reward": 0.0}


@pytest.fixture
def namespace(admin: Client) -> str:
    return admin.create_namespace(unique("client")).name


def steps(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"index": i, "state": {"observation": f"obs {i}"}, "action": {"tool": "move", "to": i}}
        for i in range(start, start + n)
    ]


def test_health(admin: Client) -> None:
    assert admin.healthz()["status"] == "ok"
    assert admin.readyz()["status"] == "ready"


def test_namespaces_create_replay_conflict_list(admin: Client) -> None:
    name = unique("ns")
    created = admin.create_namespace(name, {"gamma": 0.9})
    assert (created.name, created.settings.gamma) == (name, 0.9)
    assert admin.create_namespace(name, {"gamma": 0.9}).created_at == created.created_at
    with pytest.raises(errors.Conflict):
        admin.create_namespace(name, {"gamma": 0.5})
    assert name in {ns.name for ns in admin.list_namespaces()}
    # Reflection settings pass through the client; the server validates them.
    quiet = admin.create_namespace(unique("ns"), {"reflection": {"contrastive": {"enabled": False}}})
    assert quiet.settings.reflection["contrastive"]["enabled"] is False
    with pytest.raises(errors.InvalidInput) as caught:
        admin.create_namespace(unique("ns"), {"reflection": {"contrastive": {"enabld": False}}})
    assert "enabld" in str(caught.value)


def test_keys_roles_and_scopes(admin: Client, live_server: Any, namespace: str) -> None:
    key = admin.create_key("agent", [namespace], description="client test")
    assert key.role == "agent" and key.namespaces == [namespace] and key.key
    with Client(live_server.url, key.key, namespace=namespace) as agent:
        assert agent.create_trajectory(task="t").namespace == namespace
        with pytest.raises(errors.Forbidden):
            agent.create_namespace(unique("nope"))
        with pytest.raises(errors.NotFound):
            agent.create_trajectory(unique("other"), task="t")
    with Client(live_server.url, "rfx_not_a_key") as stranger, pytest.raises(errors.Unauthorized):
        stranger.list_namespaces()


def test_keys_are_listed_without_secrets_and_revoked(admin: Client, live_server: Any, namespace: str) -> None:
    key = admin.create_key("agent", [namespace], description="to revoke")
    listed = {k.id: k for k in admin.list_keys()}
    assert listed[key.id].revoked_at is None and "key" not in listed[key.id].model_dump()
    revoked = admin.revoke_key(key.id)
    assert revoked.revoked_at is not None
    assert admin.revoke_key(key.id).revoked_at == revoked.revoked_at  # again: a no-op
    with Client(live_server.url, key.key, namespace=namespace) as agent, pytest.raises(errors.Unauthorized):
        agent.list_trajectories()
    with pytest.raises(errors.NotFound):
        admin.revoke_key("key_missing")


def test_a_rotated_key_works_through_its_grace_period_then_not(admin: Client, live_server: Any, namespace: str) -> None:
    old = admin.create_key("trainer", [namespace], description="rotating")
    new = admin.rotate_key(old.id, grace_seconds=2)
    assert (new.role, new.namespaces, new.description) == ("trainer", [namespace], "rotating") and new.id != old.id
    listed = {k.id: k for k in admin.list_keys()}
    assert listed[old.id].expires_at is not None and listed[new.id].expires_at is None
    with (
        Client(live_server.url, old.key, namespace=namespace) as before,
        Client(live_server.url, new.key, namespace=namespace) as after,
    ):
        before.list_trajectories()  # both work during the grace period
        after.list_trajectories()
        time.sleep(2.2)
        with pytest.raises(errors.Unauthorized) as caught:
            before.list_trajectories()
        assert "rotated" in str(caught.value)
        after.list_trajectories()
    with pytest.raises(errors.Conflict):
        admin.rotate_key(old.id)
    immediate = admin.rotate_key(new.id, grace_seconds=0)
    with Client(live_server.url, new.key, namespace=namespace) as gone, pytest.raises(errors.Unauthorized):
        gone.list_trajectories()
    with Client(live_server.url, immediate.key, namespace=namespace) as current:
        current.list_trajectories()


def test_trajectory_lifecycle(admin: Client, namespace: str) -> None:
    trajectory_id = unique("t")
    body: dict[str, Any] = {
        "id": trajectory_id,
        "task": "open the door",
        "environment": "house",
        "agent": "bot",
        "policy_version": "v1",
        "metadata": {"seed": 1},
        "steps": steps(2),
    }
    first = admin.create_trajectory(namespace, **body)
    assert (first.id, first.status, first.step_count) == (trajectory_id, "open", 2)
    assert first.consistency_token

    replay = admin.create_trajectory(namespace, **body)
    assert replay.id == first.id and replay.created_at == first.created_at
    with pytest.raises(errors.Conflict) as conflict:
        admin.create_trajectory(namespace, id=trajectory_id, task="something else")
    assert conflict.value.field == "id"

    appended = admin.append_steps(namespace, trajectory_id, steps(3, start=2))
    assert (appended.step_count, appended.appended) == (5, 3)
    again = admin.append_steps(namespace, trajectory_id, steps(3, start=2))
    assert (again.step_count, again.appended) == (5, 0)
    with pytest.raises(errors.Conflict):
        admin.append_steps(namespace, trajectory_id, steps(1, start=9))

    closed = admin.report_outcome(namespace, trajectory_id, success=True, reward=1.0, details={"turns": 5})
    assert closed.status == "closed" and closed.outcome is not None and closed.outcome.success is True
    assert admin.report_outcome(namespace, trajectory_id, success=True, reward=1.0, details={"turns": 5})
    with pytest.raises(errors.Conflict):
        admin.report_outcome(namespace, trajectory_id, success=False)
    with pytest.raises(errors.Conflict):
        admin.append_steps(namespace, trajectory_id, steps(1, start=5))

    got = admin.get_trajectory(namespace, trajectory_id)
    assert [s.index for s in got.steps or []] == [0, 1, 2, 3, 4]
    assert got.steps and got.steps[4].action == {"tool": "move", "to": 4}

    deleted = admin.delete_trajectory(namespace, trajectory_id)
    assert (deleted.id, deleted.deleted_steps) == (trajectory_id, 5)
    with pytest.raises(errors.NotFound):
        admin.get_trajectory(namespace, trajectory_id)


def test_batch_is_atomic_and_names_the_bad_item(admin: Client, namespace: str) -> None:
    group = unique("g")
    items = [{"task": "same task", "group_id": group, "steps": [STEP], "outcome": {"reward": r}} for r in (0, 1)]
    items = [dict(item, id=unique("b")) for item in items]
    result = admin.create_trajectories(namespace, items)
    assert (result.created, result.replayed) == (2, 0)
    assert [item.status for item in result.items] == ["closed", "closed"]
    assert admin.create_trajectories(namespace, items).replayed == 2

    fresh = {"id": unique("b"), "task": "t"}
    unstorable = {"task": "t", "steps": [{"state": {"observation": "nul \x00 inside"}, "action": "a"}]}
    with pytest.raises(errors.InvalidInput) as caught:
        admin.create_trajectories(namespace, [fresh, unstorable])
    assert caught.value.field == "trajectories[1].steps[0].state.observation"
    with pytest.raises(errors.NotFound):
        admin.get_trajectory(namespace, fresh["id"])


def test_list_filters_and_pagination(admin: Client, namespace: str) -> None:
    group = unique("g")
    outcomes = [{"success": i % 2 == 0} for i in range(7)]
    admin.create_trajectories(
        namespace, [{"task": f"t{i}", "group_id": group, "outcome": o} for i, o in enumerate(outcomes)]
    )
    admin.create_trajectory(namespace, task="still open", group_id=group)

    page = admin.list_trajectories(namespace, group_id=group, limit=3)
    assert len(page.items) == 3 and page.next_cursor
    everything = list(admin.iter_trajectories(namespace, group_id=group, page_size=3))
    assert len(everything) == 8 and len({t.id for t in everything}) == 8
    assert len(list(admin.iter_trajectories(namespace, group_id=group, success=True))) == 4
    assert [t.task for t in admin.iter_trajectories(namespace, group_id=group, status="open")] == ["still open"]
    with_steps = admin.list_trajectories(namespace, group_id=group, limit=1, include_steps=True)
    assert with_steps.items[0].steps == []


def test_episode_logger_end_to_end(admin: Client, namespace: str) -> None:
    with admin.episode(namespace, task="walk 500 steps", agent="walker", strict=True) as ep:
        for i in range(500):
            ep.step(f"position {i}", "step forward", reward=0.01, done=i == 499, metadata={"i": i})
        ep.finish(success=True, reward=5.0)
    assert ep.stats.delivered and ep.stats.sent == 500

    stored = admin.get_trajectory(namespace, ep.id)
    assert [s.index for s in stored.steps or []] == list(range(500))
    assert stored.status == "closed" and stored.step_count == 500
    assert stored.outcome is not None and (stored.outcome.success, stored.outcome.reward) == (True, 5.0)
    assert stored.steps and stored.steps[499].done and stored.steps[7].metadata == {"i": 7}


def test_an_episode_records_rollouts_a_trainer_reads_back(admin: Client, namespace: str) -> None:
    """Per-step policy versions and rollout log-probs: sent by Episode.step, read back
    typed by get_trajectory (null where not recorded: the trajectory's version applies)."""
    with admin.episode(namespace, task="async rl", policy_version="v1", strict=True) as ep:
        ep.step("prompt", "answer", policy_version="v2", rollout_logprobs=[-0.5, -1.25], rollout_token_ids=[11, 12])
        ep.step("tool output", "final", rollout_logprobs=(-0.0625,), done=True)
        ep.step("after", "noop")
        ep.finish(success=True, reward=1.0)
    stored = admin.get_trajectory(namespace, ep.id)
    assert stored.policy_version == "v1" and stored.steps
    assert [(s.policy_version, s.rollout_logprobs, s.rollout_token_ids) for s in stored.steps] == [
        ("v2", [-0.5, -1.25], [11, 12]),
        (None, [-0.0625], None),
        (None, None, None),
    ]
    with pytest.raises(errors.InvalidInput) as caught:  # checked before it is sent, as the server would
        admin.append_steps(
            namespace, ep.id, [{"state": {"observation": "o"}, "action": "a", "rollout_logprobs": [0.5]}]
        )
    assert "rollout_logprobs[0]" in str(caught.value)


def test_an_interrupted_episode_stays_open(admin: Client, namespace: str) -> None:
    with pytest.raises(RuntimeError), admin.episode(namespace, task="crashes") as ep:
        ep.step("before the crash", "act")
        raise RuntimeError("agent crashed")
    stored = admin.get_trajectory(namespace, ep.id)
    assert stored.status == "open" and stored.step_count == 1


def test_cli_ingest(
    live_server: Any, admin: Client, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [json.dumps({"task": f"ingested {i}", "steps": [STEP], "outcome": {"success": True}}) for i in range(12)]
    lines.insert(5, '{"task": "cut off"')
    source = tmp_path / "rollouts.jsonl"
    source.write_text("\n".join(lines) + "\n")
    argv = [
        "ingest",
        str(source),
        "--namespace",
        namespace,
        "--batch-size",
        "5",
        "--url",
        live_server.url,
        "--api-key",
        live_server.admin_key,
    ]

    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert "line 6: invalid JSON" in err
    assert "13 lines: 12 new, 0 replays, 1 failed" in out
    assert len(list(admin.iter_trajectories(namespace))) == 12

    assert cli.main(argv) == 1
    assert "13 lines: 0 new, 12 replays, 1 failed" in capsys.readouterr().out
    assert len(list(admin.iter_trajectories(namespace))) == 12


@pytest.mark.anyio
async def test_async_client(live_server: Any, namespace: str) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        written = await client.create_trajectory(task="async", steps=[STEP])
        await client.append_steps(None, written.id, steps(1, start=1))
        got = await client.get_trajectory(None, written.id)
        found = [t.id async for t in client.iter_trajectories()]
    assert got.step_count == 2
    assert found == [written.id]


# --- retrieval ------------------------------------------------------------------------------

ROOMS = {
    "a dusty attic with a locked oak chest": "open the chest with the brass key",
    "a flooded basement where a pump hums": "switch the pump off",
    "a sunny garden with a green tool shed": "take the spade from the shed",
}


def test_a_finished_episode_is_retrievable_at_once(admin: Client, namespace: str) -> None:
    """No sleeps: the client's session token makes the retrieve wait for the episode."""
    with admin.episode(namespace, task="find the treasure", strict=True) as ep:
        for observation, action in ROOMS.items():
            ep.step(observation, action)
        ep.finish(success=True)
    for observation, action in ROOMS.items():
        result = admin.retrieve(namespace, observation)
        top = result.items[0]
        assert (top.kind, top.content["observation"], top.content["action"]) == ("exemplar", observation, action)
        assert [link.trajectory_id for link in top.evidence] == [ep.id]
    assert admin.session_token(namespace) is None


def test_an_episode_retrieval_is_credited_by_the_episodes_outcome(admin: Client, namespace: str) -> None:
    with admin.episode(namespace, task="cross the cave") as earlier:
        earlier.step("a cold dark cave", "light a torch")
        earlier.finish(success=True)

    with admin.episode(namespace, task="cross the cave again") as ep:
        served = ep.retrieve("a cold dark cave", render="markdown")
        ep.step("a cold dark cave", "follow the draught")
        ep.finish(success=True)
    assert ep.retrieval_ids == [served.retrieval_id]
    item = served.items[0]
    assert item.content["action"] == "light a torch" and item.utility.uses == 0
    assert served.context and "light a torch" in served.context

    later = admin.retrieve(namespace, "a cold dark cave")
    credited = next(found for found in later.items if found.id == item.id)
    assert (credited.utility.uses, credited.utility.successes, credited.utility.failures) == (1, 1, 0)
    # The episode's outcome already credited it: a second outcome for the retrieval conflicts.
    with pytest.raises(errors.Conflict):
        admin.report_retrieval_outcome(namespace, served.retrieval_id, success=False)


def test_retrieval_outcome_replay_and_conflict(admin: Client, namespace: str) -> None:
    admin.create_trajectory(namespace, task="t", steps=[STEP], outcome={"success": True})
    result = admin.retrieve(namespace, STEP["state"]["observation"], k=5)
    assert result.items
    first = admin.report_retrieval_outcome(namespace, result.retrieval_id, success=True, reward=1.0)
    assert (first.retrieval_id, first.success, first.reward) == (result.retrieval_id, True, 1.0)
    assert first.credited_items == len(result.items)
    replay = admin.report_retrieval_outcome(namespace, result.retrieval_id, success=True, reward=1.0)
    assert replay.credited_items == 0
    with pytest.raises(errors.Conflict):
        admin.report_retrieval_outcome(namespace, result.retrieval_id, success=False, reward=0.0)
    with pytest.raises(errors.NotFound):
        admin.report_retrieval_outcome(namespace, "r_no_such_retrieval", success=True)
    top = admin.retrieve(namespace, STEP["state"]["observation"]).items[0]
    assert (top.utility.uses, top.utility.successes) == (1, 1)
    # Crediting only what the agent acted on; an item that was not served is named.
    again = admin.retrieve(namespace, STEP["state"]["observation"], k=5)
    with pytest.raises(errors.InvalidInput) as caught:
        admin.report_retrieval_outcome(namespace, again.retrieval_id, success=True, item_ids=["ex_never_served"])
    assert caught.value.field == "item_ids[0]"
    acted = admin.report_retrieval_outcome(namespace, again.retrieval_id, success=True, item_ids=[top.id])
    assert acted.credited_items == 1


def test_wait_searchable_episode_is_searchable_by_anyone_on_exit(
    live_server: Any, admin: Client, namespace: str
) -> None:
    with admin.episode(namespace, task="t", wait_searchable_ms=20_000, flush_timeout=30, strict=True) as ep:
        ep.step("a narrow bridge over a canyon", "walk slowly")
        ep.finish(success=True)
    assert ep.stats.delivered and ep.stats.last_error is None
    # A client with no session (another process, say) needs no token to see it.
    with Client(live_server.url, live_server.admin_key) as other:
        result = other.retrieve(namespace, "a narrow bridge over a canyon", consistency="none")
    assert result.items and [link.trajectory_id for link in result.items[0].evidence] == [ep.id]
    assert result.waited_ms == 0


def test_an_explicit_token_gives_another_client_the_write(live_server: Any, admin: Client, namespace: str) -> None:
    written = admin.create_trajectory(namespace, task="t", steps=[STEP], outcome={"success": True})
    with Client(live_server.url, live_server.admin_key) as other:
        result = other.retrieve(namespace, STEP["state"]["observation"], consistency=written.consistency_token)
    assert result.items and result.items[0].evidence[0].trajectory_id == written.id
    with pytest.raises(errors.InvalidInput) as caught:
        admin.retrieve(namespace, "x", consistency="not-a-token")
    assert caught.value.field == "consistency_token"


def test_consistency_timeouts_with_the_worker_stopped(tmp_path: Path) -> None:
    """No worker: nothing becomes searchable, so every wait runs out. The client
    reports it without retrying, keeps its session, and catches up once a worker runs."""
    from migrations import upgrade  # the server's; only this test starts a server of its own

    database_url = f"sqlite:///{tmp_path / 'reflexa.db'}"
    upgrade(database_url)
    server = start_server(
        database_url, tmp_path, env={"REFLEXA_WORKER__IN_PROCESS": "false"}, log=tmp_path / "server.log"
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        with Client(server.url, server.admin_key, namespace="stalled") as client:
            client.create_namespace("stalled")
            written = client.create_trajectory(task="t", steps=[STEP], outcome={"success": True})
            started = time.monotonic()
            with pytest.raises(errors.ConsistencyTimeout) as caught:
                client.retrieve(None, STEP["state"]["observation"], wait_timeout_ms=300)
            assert caught.value.rule == "wait_timeout" and time.monotonic() - started < 3  # not retried
            assert client.session_token() == written.consistency_token

            with client.episode(task="t", wait_searchable_ms=300, strict=True) as ep:
                ep.step("a lighthouse on a cliff", "climb the stairs")
                ep.finish(success=True)
            assert ep.stats.delivered and isinstance(ep.stats.last_error, errors.ConsistencyTimeout)
            pending = client.session_token()
            assert pending and pending != written.consistency_token  # the episode's write joined it

            worker = start_worker(database_url, tmp_path / "worker", log=tmp_path / "worker.log")
            result = client.retrieve(None, "a lighthouse on a cliff", wait_timeout_ms=60_000)
            assert result.items[0].evidence[0].trajectory_id == ep.id
            assert client.session_token() is None
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        server.stop()


@pytest.mark.anyio
async def test_async_retrieve_reads_its_writes(live_server: Any, namespace: str) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        written = await client.create_trajectory(task="async", steps=[STEP], outcome={"success": True})
        result = await client.retrieve(None, STEP["state"]["observation"])
        assert client.session_token() is None
        outcome = await client.report_retrieval_outcome(None, result.retrieval_id, success=True)
    assert result.items[0].evidence[0].trajectory_id == written.id
    assert outcome.credited_items == len(result.items)


def test_retrieve_batch_reads_its_writes_and_answers_each_state(live_server: Any, namespace: str) -> None:
    with Client(live_server.url, live_server.admin_key, namespace=namespace) as client:
        written = client.create_trajectory(task="batch", steps=[STEP], outcome={"success": True})
        other = {"state": {"observation": "a meadow at dawn"}, "k": 1}
        results = client.retrieve_batch(None, [{"state": STEP["state"], "k": 2}, other])
        assert client.session_token() is None  # the session's token went with the first request
        single = client.retrieve(None, "a meadow at dawn", k=1)
    assert len(results) == 2 and results[0].retrieval_id != results[1].retrieval_id
    assert results[0].items[0].exact_match and results[0].items[0].evidence[0].trajectory_id == written.id
    assert [i.id for i in results[1].items] == [i.id for i in single.items]


@pytest.mark.anyio
async def test_async_retrieve_batch(live_server: Any, namespace: str) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        await client.create_trajectory(task="async batch", steps=[STEP], outcome={"success": True})
        results = await client.retrieve_batch(None, [models.RetrieveRequest(state=STEP["state"], k=1)])
    assert results[0].items[0].exact_match


def test_every_client_route_exists_in_the_servers_openapi(live_server: Any) -> None:
    """The client's routes are written by hand; the server's OpenAPI is the contract."""
    examples: dict[str, tuple[Any, ...]] = {
        "healthz": (),
        "readyz": (),
        "create_key": ("agent", ["nsx"], None),
        "list_keys": (),
        "revoke_key": ("idx",),
        "rotate_key": ("idx", 60),
        "create_namespace": ("nsx", None),
        "list_namespaces": (None,),
        "get_namespace": ("nsx",),
        "create_trajectory": ("nsx", {"id": "idx", "task": "t"}),
        "create_trajectories": ("nsx", [{"task": "t"}]),
        "get_trajectory": ("nsx", "idx"),
        "list_trajectories": ("nsx",),
        "append_steps": ("nsx", "idx", [STEP]),
        "report_outcome": ("nsx", "idx", {}),
        "delete_trajectory": ("nsx", "idx"),
        "retrieve": ("nsx", {"state": {"observation": "o"}}),
        "retrieve_batch": ("nsx", [{"state": {"observation": "o"}}]),
        "report_retrieval_outcome": ("nsx", "ridx", {}),
        "check_action": ("nsx", {"state": {"observation": "o"}, "action": "a"}),
        "create_snapshot": ("nsx", "idx", None),
        "list_snapshots": ("nsx", 10, "c"),
        "get_snapshot": ("nsx", "idx"),
        "delete_snapshot": ("nsx", "idx"),
        "freeze": ("nsx",),
        "thaw": ("nsx",),
        "get_freeze": ("nsx",),
        "list_tasks": ("nsx",),
        "distill_contexts": ("nsx", ["a1"], ["memory"]),
        "distill_prefixes": ("nsx",),
        "create_rubric": ("nsx", {"id": "idx", "name": "n", "criteria": [{"id": "c", "text": "t", "weight": 1}]}),
        "get_rubric": ("nsx", "idx"),
        "score_rubric": ("nsx", "idx", {"trajectory_id": "t"}),
        "score_rubric_batch": ("nsx", "idx", [{"trajectory_id": "t"}]),
        "create_reward_capability": ("nsx", "idx", None),
        "list_reward_capabilities": ("nsx", "idx", 10, "c"),
        "revoke_reward_capability": ("nsx", "idx", "cidx"),
        "teacher_logprobs": ("nsx", [{"context": "a b", "continuation": [1, 2]}]),
        "distill_advantages": ("grpo", [{"group_id": "g", "trajectories": [{"id": "a", "reward": 1.0}]}]),
        "distill_advantages_arrays": ("grpo", [{"group_id": "g", "trajectories": [{"id": "a", "reward": 1.0}]}]),
    }
    keywords: dict[str, dict[str, Any]] = {
        "list_tasks": {
            "group_by": "task",
            "sort": "attempts",
            "order": "asc",
            "environment": "e",
            "agent": "a",
            "policy_version": "p",
            "min_attempts": 1,
            "snapshot": "s",
            "limit": 10,
            "cursor": "c",
        },
        "distill_contexts": dict.fromkeys(("snapshot", "leakage", "template", "history_max_chars", "include", "steps")),
        "distill_prefixes": {
            "step": 0,
            "schedule": {"kind": "step_decay", "start_fraction": 1.0, "half_life_steps": 1},
            "tasks": ["t"],
            "trajectories": None,
            "k": None,
            "snapshot": None,
            "leakage": None,
        },
        "score_rubric_batch": {"snapshot": None, "skip_judged": False},
        "teacher_logprobs": dict.fromkeys(("contexts", "top_k", "entropy", "wait")),
        "distill_advantages": {"params": {"std": False}},
        "distill_advantages_arrays": {"params": {"std": False}},
    }
    builders = {
        name
        for name, value in vars(operations).items()
        if callable(value) and str(getattr(value, "__annotations__", {}).get("return", "")).startswith("Operation[")
    }
    assert builders == set(examples)  # a new route must be added here to be checked

    openapi = httpx.get(f"{live_server.url}/openapi.json").json()
    paths = openapi["paths"]
    placeholders = {"nsx": "{ns}", "idx": "{id}", "ridx": "{retrieval_id}", "cidx": "{capability_id}"}
    for name, args in examples.items():
        op = getattr(operations, name)(*args, **keywords.get(name, {}))
        template = "/".join(placeholders.get(part, part) for part in op.path.split("/"))
        route = paths.get(template, {})
        assert op.method.lower() in route, f"{name}: {op.method} {template}"
        # Every query parameter the client sends is one the server reads.
        known = {parameter["name"] for parameter in route[op.method.lower()].get("parameters", [])}
        assert set(op.params or {}) <= known, (name, set(op.params or {}) - known)
    assert "post" in paths["/v1/reward/{capability}"]  # a reward URL is no client operation

    # The bodies the client sends name exactly the server's fields, and what it reads
    # names exactly what the server answers (a field the server adds must be mirrored).
    schemas = openapi["components"]["schemas"]
    mirrored = {
        "RetrieveRequest": models.RetrieveRequest,
        "RetrieveFilters": models.RetrieveFilters,
        "RenderOptions": models.RenderOptions,
        "RetrievalOutcomeCreate": models.RetrievalOutcomeReport,
        "RetrieveBatchRequest": models.RetrieveBatchRequest,
        "TrajectoryCreate": models.TrajectoryCreate,
        "NamespaceSettings": models.NamespaceSettings,
        "RankingSettings": models.RankingSettings,
        "SnapshotCreate": models.SnapshotCreate,
        "ContextsRequest": models.ContextsRequest,
        "ContextTrajectory": models.ContextTrajectory,
        "TeacherSpec": models.TeacherSpec,
        "LeakageOptions": models.LeakageOptions,
        "TeacherLogprobsRequest": models.TeacherLogprobsRequest,
        "TeacherLogprobsItem": models.TeacherLogprobsItem,
        "TeacherContinuation": models.TeacherContinuation,
        "TeacherPrompt": models.TeacherPrompt,
        "ChatTurn": models.ChatTurn,
        "TeacherContextRef": models.TeacherContextRef,
        "TeacherContextsOptions": models.TeacherContextsOptions,
        "AdvantagesRequest": models.AdvantagesRequest,
        "AdvantageGroup": models.AdvantageGroup,
        "AdvantageTrajectory": models.AdvantageTrajectory,
        "Logprobs": models.Logprobs,
        "TeacherTopK": models.TeacherTopK,
        "CheckRequest": models.CheckRequest,
        "CheckState": models.CheckState,
        # answers
        "TrajectoryRead": models.Trajectory,
        "RetrieveResponse": models.RetrieveResult,
        "NamespaceRead": models.Namespace,
        "NamespaceSettingsRead": models.NamespaceSettingsRead,
        "SnapshotRead": models.Snapshot,
        "FreezeRead": models.FreezeState,
        "TaskStatsRead": models.TaskStats,
        "TaskStatsPage": models.TaskStatsPage,
        "ContextsResponse": models.ContextsResult,
        "TrajectoryContexts": models.TrajectoryContexts,
        "StepContexts": models.StepContexts,
        "PlainContext": models.PlainContext,
        "TeacherContext": models.TeacherContext,
        "LeakageRead": models.LeakageApplied,
        "ChatMessage": models.ChatMessage,
        "TeacherLogprobsResponse": models.TeacherLogprobsResult,
        "ScoredItem": models.ScoredItem,
        "TopLogprob": models.TopLogprob,
        "ContextUsed": models.ContextUsed,
        "TeacherEndpointRead": models.TeacherEndpoint,
        "TeacherTiming": models.TeacherTiming,
        "AdvantagesResponse": models.AdvantagesResponse,
        "TrajectoryAdvantages": models.TrajectoryAdvantages,
        "Diagnostics": models.Diagnostics,
        "BatchDiagnostics": models.BatchDiagnostics,
        "GroupDiagnostics": models.GroupDiagnostics,
        "Stats": models.Stats,
        "CheckResponse": models.CheckResult,
        "CheckRisk": models.CheckRisk,
        "CheckEvidence": models.CheckEvidence,
        "CheckAlternative": models.CheckAlternative,
        "CheckHeuristic": models.CheckHeuristic,
        "RubricCreate": models.RubricCreate,
        "CriterionCreate": models.RubricCriterion,
        "ScoreItem": models.RubricScoreItem,
        "ScoreRequest": models.RubricScoreRequest,
        "ScoreBatchRequest": models.RubricScoreBatchRequest,
        "CapabilityCreate": models.RewardCapabilityCreate,
        "RubricRead": models.Rubric,
        "CriterionRead": models.RubricCriterionRead,
        "ScoreRead": models.RubricScore,
        "CriterionScoreRead": models.CriterionScore,
        "StageScoreRead": models.StageScore,
        "ScoreBatchRead": models.RubricBatchScore,
        "CapabilityRead": models.RewardCapability,
        "CapabilityCreated": models.RewardCapabilityCreated,
    }
    for server_name, model in mirrored.items():
        assert set(model.model_fields) == set(schemas[server_name]["properties"]), server_name
    # The advantage methods the client lets through are exactly the server's.
    methods = schemas["AdvantagesRequest"]["properties"]["method"]["enum"]
    assert set(get_args(models.AdvantageMethod)) == set(methods)
    # A snapshot read has no retrieval to credit: the server may answer null.
    retrieval_id = schemas["RetrieveResponse"]["properties"]["retrieval_id"]
    assert {"type": "null"} in retrieval_id.get("anyOf", []), retrieval_id
    close = paths["/v1/namespaces/{ns}/trajectories/{id}/outcome"]["post"]
    assert "wait_ms" in {parameter["name"] for parameter in close.get("parameters", [])}

    # And every filter the client sends is a parameter the server reads.
    listing = paths["/v1/namespaces/{ns}/trajectories"]["get"]
    known = {parameter["name"] for parameter in listing["parameters"]}
    filters = dict.fromkeys(TrajectoryFilters.__annotations__, "x")
    sent = operations.list_trajectories("nsx", limit=1, cursor="x", **filters).params or {}
    assert set(sent) == {"limit", "cursor", *filters}
    assert set(sent) <= known, set(sent) - known
