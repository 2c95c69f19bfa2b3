"""The trainer surface of the client against a real server (``live_server``: uvicorn
over HTTP on SQLite): snapshots and their idempotent retries, freezes, curriculum
statistics paged through ``iter_tasks``, teacher contexts for stored and inline
trajectories, retrieval under a snapshot (and the consistency session around it),
attempts, the async client, and the errors each maps to.

Every test works in a namespace of its own, so they share one server safely.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from reflexa import AsyncClient, Client, errors, models
from reflexa import _operations as operations

from tests.factories import unique


@pytest.fixture
def namespace(admin: Client) -> str:
    return admin.create_namespace(unique("trainer")).name


class Recorder:
    """The JSON bodies and query strings of the requests an ``httpx.Client`` sends."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> None:
        self.requests.append(request)

    def bodies(self, path_suffix: str) -> list[Any]:
        return [json.loads(r.content) for r in self.requests if r.url.path.endswith(path_suffix) and r.content]

    def count(self, path_suffix: str) -> int:
        return sum(1 for r in self.requests if r.url.path.endswith(path_suffix))


def recording_client(live_server: Any, namespace: str, recorder: Recorder, **kwargs: Any) -> Client:
    http = httpx.Client(event_hooks={"request": [recorder]})
    return Client(live_server.url, live_server.admin_key, namespace=namespace, http_client=http, **kwargs)


class LoseAnswer(httpx.BaseTransport):
    """Delivers every request, but loses the answer to the first ``method`` on a path
    ending in ``suffix``: the server did the work, the client saw a read timeout."""

    def __init__(self, method: str, suffix: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.method, self.suffix = method, suffix
        self.sent: list[httpx.Request] = []
        self.lost = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == self.method and request.url.path.endswith(self.suffix):
            self.sent.append(request)
            if not self.lost:
                self.lost = True
                response.read()
                response.close()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def steps(*observations: str) -> list[dict[str, Any]]:
    return [{"state": {"observation": o}, "action": f"act on {o}"} for o in observations]


def memory(client: Client, namespace: str) -> None:
    """Two tasks of stored, closed trajectories, searchable once this returns (the
    session's retrieve waits for them): ``a1``/``a2`` a mixed rollout group."""
    client.create_trajectory(
        namespace,
        id="a1",
        task="open the door",
        group_id="g1",
        steps=steps("a hall", "a locked door", "an open door"),
        outcome={"success": True, "reward": 1.0},
    )
    client.create_trajectory(
        namespace,
        id="a2",
        task="open the door",
        group_id="g1",
        steps=steps("a hall", "a locked door"),
        outcome={"success": False, "reward": 0.0},
    )
    client.create_trajectory(
        namespace,
        id="b1",
        task="find the key",
        steps=steps("a hall", "a drawer"),
        outcome={"success": True, "reward": 1.0},
    )
    assert client.retrieve(namespace, "a hall").items


# --- snapshots ------------------------------------------------------------------------------


def test_snapshot_lifecycle(admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    made = admin.create_snapshot(namespace, note="epoch 1")
    assert made.id.startswith("snap_") and made.namespace == namespace and made.note == "epoch 1"
    assert (made.trajectory_count, made.step_count) == (3, 7) and made.reflection_count > 0
    assert admin.get_snapshot(namespace, made.id) == made

    # The same id and note again is a replay; another note under that id a conflict.
    named = admin.create_snapshot(namespace, "epoch-2", "second")
    assert admin.create_snapshot(namespace, id="epoch-2", note="second") == named
    with pytest.raises(errors.Conflict) as conflict:
        admin.create_snapshot(namespace, id="epoch-2", note="another")
    assert (conflict.value.field, conflict.value.rule) == ("id", "idempotent_replay")
    third = admin.create_snapshot(namespace)
    assert third.note is None

    # Newest first, one page at a time or all of them.
    first_page = admin.list_snapshots(namespace, limit=2)
    assert [s.id for s in first_page.items] == [third.id, named.id] and first_page.next_cursor
    rest = admin.list_snapshots(namespace, limit=2, cursor=first_page.next_cursor)
    assert [s.id for s in rest.items] == [made.id] and rest.next_cursor is None
    assert [s.id for s in admin.iter_snapshots(namespace, page_size=1)] == [third.id, named.id, made.id]

    assert admin.delete_snapshot(namespace, named.id) is None
    with pytest.raises(errors.NotFound):
        admin.get_snapshot(namespace, named.id)
    with pytest.raises(errors.NotFound):
        admin.delete_snapshot(namespace, named.id)
    assert [s.id for s in admin.iter_snapshots(namespace)] == [third.id, made.id]


def test_a_create_snapshot_whose_answer_was_lost_is_retried_as_a_replay(live_server: Any, namespace: str) -> None:
    """The client's id is fixed before the first attempt, so the retry replays it: one snapshot."""
    lossy = LoseAnswer("POST", "/snapshots")
    with Client(
        live_server.url, live_server.admin_key, http_client=httpx.Client(transport=lossy), backoff=0.001
    ) as client:
        made = client.create_snapshot(namespace, note="retried")
        assert len(lossy.sent) == 2  # the lost attempt, then the replay
        ids = {json.loads(request.content)["id"] for request in lossy.sent}
        assert ids == {made.id}
        assert [s.id for s in client.iter_snapshots(namespace)] == [made.id]


def test_a_delete_whose_answer_was_lost_is_not_retried(live_server: Any, namespace: str) -> None:
    """A repeat would answer NotFound and hide that the delete worked: it is reported instead."""
    lossy = LoseAnswer("DELETE", "/snapshots/gone")
    with Client(
        live_server.url, live_server.admin_key, http_client=httpx.Client(transport=lossy), backoff=0.001
    ) as client:
        client.create_snapshot(namespace, "gone")
        with pytest.raises(errors.ConnectionFailed):
            client.delete_snapshot(namespace, "gone")
        assert len(lossy.sent) == 1
        assert list(client.iter_snapshots(namespace)) == []


# --- freezes --------------------------------------------------------------------------------


def test_freeze_and_thaw(admin: Client, namespace: str) -> None:
    assert admin.get_freeze(namespace) == models.FreezeState(namespace=namespace, frozen=False)
    assert admin.get_namespace(namespace).frozen is False

    frozen = admin.freeze(namespace)
    assert frozen.frozen and frozen.frozen_at is not None
    assert admin.freeze(namespace).frozen_at == frozen.frozen_at  # idempotent: the first frozen_at stays
    assert admin.get_freeze(namespace) == frozen
    shown = admin.get_namespace(namespace)
    assert (shown.name, shown.frozen, shown.frozen_at) == (namespace, True, frozen.frozen_at)
    # Ingest goes on while frozen.
    assert admin.create_trajectory(namespace, task="while frozen", outcome={"success": True}).status == "closed"

    thawed = admin.thaw(namespace)
    assert (thawed.frozen, thawed.frozen_at) == (False, None)
    assert admin.thaw(namespace) == thawed
    assert admin.get_namespace(namespace).frozen is False


# --- curriculum statistics ------------------------------------------------------------------


def rollouts(task: str, rewards: list[float], *, policy_version: str | None = None) -> list[dict[str, Any]]:
    group = unique("g")
    return [
        {
            "task": task,
            "group_id": group,
            "policy_version": policy_version,
            "outcome": {"success": r >= 1.0, "reward": r},
        }
        for r in rewards
    ]


def test_tasks_paged_through_iter_tasks(live_server: Any, admin: Client, namespace: str) -> None:
    batch = [
        *rollouts("mixed", [1.0, 0.0], policy_version="p1"),
        *rollouts("mixed", [1.0, 1.0], policy_version="p2"),
        *rollouts("half", [0.5, 0.0]),
        *rollouts("won", [1.0, 1.0]),
        {"task": "solo", "outcome": {"success": True}},
        {"task": "unfinished"},
    ]
    admin.create_trajectories(namespace, batch)

    page = admin.list_tasks(namespace, limit=100)
    assert page.snapshot is None and page.next_cursor is None
    by_task = {row.task: row for row in page.items}
    assert set(by_task) == {"mixed", "half", "won", "solo", "unfinished"}
    assert (by_task["mixed"].attempts, by_task["mixed"].groups, by_task["mixed"].mixed_groups) == (4, 2, 1)
    assert by_task["mixed"].learning_signal == pytest.approx(0.125)
    assert by_task["half"].learning_signal == pytest.approx(0.0625)
    assert by_task["won"].learning_signal == 0.0
    assert (by_task["unfinished"].attempts, by_task["unfinished"].open) == (0, 1)
    # learning_signal descending ("mixed" averages its groups' 0.25 and 0), nulls last.
    assert [row.task for row in page.items][:3] == ["mixed", "half", "won"]
    assert {row.task for row in page.items[3:]} == {"solo", "unfinished"}  # no signal: last

    # iter_tasks follows next_cursor, one request per page, the same rows in the same order.
    recorder = Recorder()
    with recording_client(live_server, namespace, recorder) as client:
        paged = list(client.iter_tasks(page_size=2))
    assert [row.model_dump() for row in paged] == [row.model_dump() for row in page.items]
    assert recorder.count("/tasks") == 3

    # Other groupings, sorts and filters.
    pairs = admin.list_tasks(namespace, group_by="task,policy_version", min_attempts=2, limit=100)
    assert {(row.task, row.policy_version) for row in pairs.items} == {
        ("mixed", "p1"),
        ("mixed", "p2"),
        ("half", None),
        ("won", None),
    }
    by_name = list(admin.iter_tasks(namespace, sort="task", order="asc", page_size=1))
    assert [row.task for row in by_name] == sorted(by_task)
    assert [row.task for row in admin.iter_tasks(namespace, policy_version="p1")] == ["mixed"]

    # Under a snapshot the pages hold still while the namespace moves on.
    snap = admin.create_snapshot(namespace)
    pinned = list(admin.iter_tasks(namespace, snapshot=snap.id, page_size=2))
    admin.create_trajectories(namespace, rollouts("later", [1.0, 0.0]))
    assert [row.model_dump() for row in admin.iter_tasks(namespace, snapshot=snap.id, page_size=2)] == [
        row.model_dump() for row in pinned
    ]
    assert admin.list_tasks(namespace, snapshot=snap.id).snapshot == snap.id
    assert "later" in {row.task for row in admin.iter_tasks(namespace)}

    # Refusals: a bad value before sending, a foreign cursor by the server.
    with pytest.raises(errors.InvalidInput) as caught:
        admin.list_tasks(namespace, sort="popularity")  # type: ignore[arg-type]
    assert caught.value.field == "sort"
    with pytest.raises(errors.InvalidInput) as caught:
        admin.list_tasks(namespace, min_attempts=-1)
    assert caught.value.field == "min_attempts"
    first = admin.list_tasks(namespace, limit=1)
    with pytest.raises(errors.InvalidInput) as caught:
        admin.list_tasks(namespace, sort="attempts", cursor=first.next_cursor, limit=1)
    assert (caught.value.field, caught.value.rule) == ("cursor", "opaque_cursor")


# --- teacher contexts -----------------------------------------------------------------------

INLINE = {
    "task": "climb the hill",
    "group_id": "g-inline",
    "steps": steps("a locked door", "a drawer"),
    "outcome": {"success": False},
}


def test_distill_contexts_for_stored_and_inline_trajectories(admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    snap = admin.create_snapshot(namespace)
    teachers: list[Any] = [
        "memory",
        models.TeacherSpec(kind="hindsight", horizon=1),
        {"kind": "hindsight", "horizon": 2, "name": "far"},
    ]
    trajectories: list[Any] = ["a1", {"id": "b1"}, INLINE, models.TrajectoryCreate(task="walk", steps=steps("a hall"))]
    result = admin.distill_contexts(namespace, trajectories, teachers, snapshot=snap.id)

    assert result.snapshot == snap.id and result.template_version.startswith("default@")
    assert [t.id for t in result.trajectories] == ["a1", "b1", None, None]
    assert [[s.index for s in t.steps] for t in result.trajectories] == [[0, 1, 2], [0, 1], [0, 1], [0]]
    for trajectory in result.trajectories:
        for step in trajectory.steps:
            assert set(step.teachers) == {"memory", "hindsight@1", "far"}

    first = result.trajectories[0].steps[0]
    assert first.plain.messages and first.plain.messages[0].role == "system"
    assert "open the door" in first.plain.messages[0].content
    assert first.plain.text and "a hall" in first.plain.text
    ahead = first.teachers["hindsight@1"]
    assert ahead.applicable and ahead.item_ids == ["step:1"] and ahead.privileged in (ahead.text or "")
    assert ahead.leakage.trajectory_scoped and ahead.chars == len(ahead.privileged)
    # The inline trajectory (another task) may be shown memory of the stored ones.
    recalled = result.trajectories[2].steps[0].teachers["memory"]
    assert recalled.applicable and recalled.item_ids and recalled.reason is None
    assert not recalled.leakage.allow_same_task

    # Under the snapshot the answer is the same every time, new memory or not.
    admin.create_trajectory(namespace, task="more", steps=steps("a locked door"), outcome={"success": True})
    assert admin.retrieve(namespace, "a locked door").items
    again = admin.distill_contexts(namespace, trajectories, teachers, snapshot=snap.id)
    assert again.model_dump() == result.model_dump()

    # Only some steps, only one rendering, guards opted out of, the server's template by name.
    narrow = admin.distill_contexts(
        namespace,
        [models.ContextTrajectory(id="a1")],
        [],
        snapshot=snap.id,
        include=["messages"],
        steps=[1],
        leakage=models.LeakageOptions(allow_same_task=True),
        template="default",
        history_max_chars=1000,
    )
    (only,) = narrow.trajectories[0].steps
    assert only.index == 1 and only.plain.text is None and only.plain.messages and only.teachers == {}


def test_distill_contexts_refusals(admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    # Refused before sending, naming the field as the server would.
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, ["a1", {"id": "a2", "steps": []}], ["memory"])
    assert caught.value.field == "trajectories[1]"
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, ["a1"], ["memory", "oracle"])
    assert caught.value.field == "teachers[1].kind"
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, [], ["memory"])
    assert caught.value.field == "trajectories"
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, "a1", ["memory"])
    assert caught.value.field == "trajectories"
    # Refused by the server.
    with pytest.raises(errors.NotFound) as missing:
        admin.distill_contexts(namespace, ["a1", "no-such-trajectory"], ["memory"])
    assert missing.value.field == "trajectories[1].id"
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, ["a1"], ["memory", {"kind": "hindsight", "name": "memory"}])
    assert (caught.value.field, caught.value.rule) == ("teachers[1].name", "unique_name")
    with pytest.raises(errors.InvalidInput) as caught:
        admin.distill_contexts(namespace, ["a1"], [{"kind": "memory", "horizon": 2}])
    assert (caught.value.field, caught.value.rule) == ("teachers[0].horizon", "not_for_kind")


# --- retrieval under a snapshot -------------------------------------------------------------

ATTIC = "a dusty attic with a locked oak chest"


def test_distill_prefixes_by_task_and_by_rollout(admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    schedule = {"kind": "step_decay", "start_fraction": 1.0, "half_life_steps": 4}
    result = admin.distill_prefixes(namespace, tasks=["open the door", "find the key"], step=4, schedule=schedule)
    assert result.fraction == 0.5 and [e.task for e in result.entries] == ["open the door", "find the key"]
    (door,) = result.entries[0].prefixes
    assert (door.trajectory_id, door.total_steps, door.prefix_steps) == ("a1", 3, 1)  # ⌊0.5 · 3⌋
    assert door.steps[0].state.observation == "a hall" and door.steps[0].action == "act on a hall"
    # a1's own rollout group is withheld; a rollout not stored yet names its task
    by_rollout = admin.distill_prefixes(
        namespace, trajectories=["a2", {"task": "find the key", "id": "new"}], step=0, schedule=schedule
    )
    assert [e.prefixes for e in by_rollout.entries][0] == [] and by_rollout.entries[0].excluded == 1
    assert by_rollout.entries[1].prefixes[0].trajectory_id == "b1"
    with pytest.raises(errors.InvalidInput) as caught:  # refused before sending
        admin.distill_prefixes(namespace, tasks=["x"], step=0, schedule={**schedule, "half_life_steps": 0})
    assert caught.value.field == "schedule.half_life_steps"


def test_retrieve_under_a_snapshot(live_server: Any, namespace: str) -> None:
    recorder = Recorder()
    with recording_client(live_server, namespace, recorder) as client:
        client.create_trajectory(task="open the chest", steps=steps(ATTIC), outcome={"success": True})
        live = client.retrieve(None, ATTIC)  # waits for the write
        assert live.retrieval_id is not None and live.items
        snap = client.create_snapshot()

        before = client.retrieve(None, ATTIC, snapshot=snap.id, render="markdown")
        assert before.retrieval_id is None and before.items and before.context

        # More experience arrives; this client's session now has a write to wait for.
        later = client.create_trajectory(
            task="open the chest again", steps=[{"state": {"observation": ATTIC}, "action": "pry it open"}]
        )
        client.report_outcome(None, later.id, success=True)
        pending = client.session_token()
        assert pending is not None

        after = client.retrieve(None, ATTIC, snapshot=snap.id, render="markdown")
        assert after.retrieval_id is None
        assert [i.model_dump() for i in after.items] == [i.model_dump() for i in before.items]
        assert after.context == before.context
        # No token went with the snapshot reads, and the session still waits for the write.
        snapshot_reads = [b for b in recorder.bodies("/retrieve") if b.get("snapshot") == snap.id]
        assert len(snapshot_reads) == 2 and not any("consistency_token" in b for b in snapshot_reads)
        assert client.session_token() == pending

        batch = client.retrieve_batch(
            None,
            [
                {"state": {"observation": ATTIC}, "snapshot": snap.id},
                {"state": {"observation": "x"}, "snapshot": snap.id},
            ],
        )
        assert [r.retrieval_id for r in batch] == [None, None]
        assert [i.id for i in batch[0].items] == [i.id for i in before.items]
        (sent,) = recorder.bodies("/retrieve/batch")
        assert not any("consistency_token" in r for r in sent["requests"])
        assert client.session_token() == pending

        # A live retrieve then waits for the write, sees it, and settles the session.
        now = client.retrieve(None, ATTIC)
        assert later.id in {link.trajectory_id for item in now.items for link in item.evidence}
        assert client.session_token() is None

        # An explicit token with a snapshot is refused before sending, as the server would.
        with pytest.raises(errors.InvalidInput) as caught:
            client.retrieve(None, ATTIC, snapshot=snap.id, consistency=pending)
        assert (caught.value.field, caught.value.rule) == ("consistency_token", "not_with_snapshot")
        with pytest.raises(errors.InvalidInput) as caught:
            client.retrieve_batch(None, [{"state": {"observation": ATTIC}, "snapshot": snap.id}], consistency=pending)
        assert (caught.value.field, caught.value.rule) == ("requests[0].consistency_token", "not_with_snapshot")
    raw = httpx.post(
        f"{live_server.url}/v1/namespaces/{namespace}/retrieve",
        json={"state": {"observation": ATTIC}, "snapshot": snap.id, "consistency_token": pending},
        headers={"Authorization": f"Bearer {live_server.admin_key}"},
    )
    assert raw.status_code == 422 and raw.json()["error"]["rule"] == "not_with_snapshot"

    # Nothing under a snapshot is logged, so even one tied to an episode may be retried.
    tied = {"state": {"observation": ATTIC}, "trajectory_id": "t1"}
    assert operations.retrieve(namespace, {**tied, "snapshot": snap.id}).retry == "idempotent"
    assert operations.retrieve(namespace, tied).retry == "unsent"


# --- attempts -------------------------------------------------------------------------------


def test_trajectories_carry_their_parent_and_attempt(admin: Client, namespace: str) -> None:
    first = admin.create_trajectory(namespace, task="cross the river", outcome={"success": False}, attempt=1)
    second = admin.create_trajectory(
        namespace, task="cross the river", parent_trajectory_id=first.id, attempt=2, outcome={"success": True}
    )
    assert (second.parent_trajectory_id, second.attempt) == (first.id, 2)
    stored = admin.get_trajectory(namespace, second.id)
    assert (stored.parent_trajectory_id, stored.attempt) == (first.id, 2)
    assert (first.parent_trajectory_id, first.attempt) == (None, 1)

    with admin.episode(namespace, task="cross the river", parent_trajectory_id=second.id, attempt=3) as ep:
        ep.step("the river bank", "swim")
        ep.finish(success=True)
    third = admin.get_trajectory(namespace, ep.id)
    assert (third.parent_trajectory_id, third.attempt) == (second.id, 3)

    with pytest.raises(errors.InvalidInput) as caught:
        admin.create_trajectory(namespace, task="t", attempt=0)
    assert caught.value.field == "attempt"


# --- the async client -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_snapshots_tasks_and_contexts(live_server: Any, admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        snap = await client.create_snapshot(note="async")
        assert snap.id.startswith("snap_") and await client.get_snapshot(None, snap.id) == snap
        assert await client.create_snapshot(None, snap.id, "async") == snap
        other = await client.create_snapshot(None, "async-2")
        assert [s.id async for s in client.iter_snapshots(page_size=1)] == [other.id, snap.id]
        assert (await client.list_snapshots(limit=1)).next_cursor

        frozen = await client.freeze()
        assert frozen.frozen and (await client.get_freeze()).frozen_at == frozen.frozen_at
        assert (await client.get_namespace()).frozen
        assert not (await client.thaw()).frozen

        tasks = [row.task async for row in client.iter_tasks(snapshot=snap.id, page_size=1)]
        assert sorted(tasks) == ["find the key", "open the door"]
        assert (await client.list_tasks(snapshot=snap.id)).snapshot == snap.id

        contexts = await client.distill_contexts(None, ["a1", INLINE], ["memory", "hindsight"], snapshot=snap.id)
        assert [t.id for t in contexts.trajectories] == ["a1", None]
        assert set(contexts.trajectories[1].steps[0].teachers) == {"memory", "hindsight@1"}
        synced = admin.distill_contexts(namespace, ["a1", INLINE], ["memory", "hindsight"], snapshot=snap.id)
        assert contexts.model_dump() == synced.model_dump()

        written = await client.create_trajectory(task="async more", steps=steps(ATTIC), outcome={"success": True})
        pinned = await client.retrieve(None, ATTIC, snapshot=snap.id)
        assert pinned.retrieval_id is None and client.session_token() == written.consistency_token
        batch = await client.retrieve_batch(None, [{"state": {"observation": ATTIC}, "snapshot": snap.id}])
        assert batch[0].retrieval_id is None and client.session_token() == written.consistency_token
        assert (await client.retrieve(None, ATTIC)).retrieval_id is not None
        assert client.session_token() is None

        await client.delete_snapshot(None, other.id)
        with pytest.raises(errors.NotFound):
            await client.get_snapshot(None, other.id)


# --- errors ---------------------------------------------------------------------------------


def test_errors_map_to_the_clients_exceptions(live_server: Any, admin: Client, namespace: str) -> None:
    memory(admin, namespace)
    # An unknown snapshot is a NotFound naming the field that named it.
    unknown = "snap_does_not_exist"
    reads = [
        lambda: admin.retrieve(namespace, "a hall", snapshot=unknown),
        lambda: admin.list_tasks(namespace, snapshot=unknown),
        lambda: admin.distill_contexts(namespace, ["a1"], ["memory"], snapshot=unknown),
    ]
    for read in reads:
        with pytest.raises(errors.NotFound) as caught:
            read()
        assert caught.value.field == "snapshot" and caught.value.status == 404
    with pytest.raises(errors.NotFound) as caught:
        admin.retrieve_batch(namespace, [{"state": {"observation": "a hall"}, "snapshot": unknown}])
    assert caught.value.field == "requests[0].snapshot"
    with pytest.raises(errors.NotFound) as caught:
        admin.get_snapshot(namespace, unknown)
    assert caught.value.field == "id"
    with pytest.raises(errors.NotFound):
        admin.get_namespace(unique("nowhere"))
    with pytest.raises(errors.NotFound):
        admin.freeze(unique("nowhere"))

    # An agent key may read task statistics and the freeze state, but not take
    # snapshots, freeze, or build teacher contexts.
    snap = admin.create_snapshot(namespace)
    agent_key = admin.create_key("agent", [namespace]).key
    with Client(live_server.url, agent_key, namespace=namespace) as agent:
        assert agent.list_tasks().items
        assert agent.get_freeze().frozen is False
        refused = [
            agent.create_snapshot,
            agent.list_snapshots,
            lambda: agent.get_snapshot(None, snap.id),
            lambda: agent.delete_snapshot(None, snap.id),
            agent.freeze,
            agent.thaw,
            lambda: agent.distill_contexts(None, ["a1"], ["memory"]),
        ]
        for call in refused:
            with pytest.raises(errors.Forbidden) as forbidden:
                call()
            assert forbidden.value.status == 403
    assert admin.get_snapshot(namespace, snap.id) == snap
    assert admin.get_freeze(namespace).frozen is False
