"""The pre-action check through the client against a real server (``live_server``):
``Client.check_action``, its generated async twin, and ``Episode.check_action``."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from reflexa import AsyncClient, Client, models

from tests.factories import unique

S = "You stand before a heavy oak door. It is locked; a brass key lies on the mat."


@pytest.fixture
def namespace(admin: Client) -> str:
    """A namespace where, in state S, "kick door" failed 3 of 4 times and "unlock door" succeeded 2 of 2."""
    ns = admin.create_namespace(unique("check")).name
    for i, (action, success) in enumerate(
        [("kick door", False), ("kick door", False), ("kick door", True), ("kick door", False)]
        + [("unlock door", True)] * 2
    ):
        admin.create_trajectory(
            ns,
            id=f"t{i}",
            task="open the door",
            steps=[{"state": {"observation": S}, "action": action}],
            outcome={"success": success},
        )
    return ns


def assert_kick_door(result: models.CheckResult) -> None:
    risk = result.risk
    assert (risk.failures, risk.attempts, result.support) == (3, 4, 4)
    assert risk.rate == pytest.approx(0.75) and risk.low is not None and risk.high is not None
    assert risk.low < 0.75 < risk.high and result.exact_match
    assert [(e.trajectory_id, e.success) for e in result.evidence] == [
        ("t0", False),
        ("t1", False),
        ("t3", False),
        ("t2", True),
    ]
    [alt] = result.alternatives
    assert (alt.action, alt.successes, alt.attempts, alt.success_rate) == ("unlock door", 2, 2, 1.0)
    assert result.retrieval_id is not None


def test_the_signature_other_integrations_call() -> None:
    for cls in (Client, AsyncClient):
        params = inspect.signature(cls.check_action).parameters
        assert list(params) == [
            "self",
            "namespace",
            "observation",
            "action",
            "data",
            "internal_state",
            "task",
            "k",
            "filters",
        ]
        assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in list(params)[4:])
        assert all(params[p].default is None for p in list(params)[4:])


def test_check_action_reads_its_writes(admin: Client, namespace: str) -> None:
    """No sleeps: the session's token makes the check wait for the trajectories just written."""
    result = admin.check_action(namespace, S, "kick door")
    assert isinstance(result, models.CheckResult)
    assert_kick_door(result)
    assert admin.session_token(namespace) is None
    # A tool call, a different state: no history, no error.
    other = admin.check_action(namespace, "a meadow at dawn", {"name": "kick", "arguments": {"what": "door"}}, k=5)
    assert other.risk.rate is None and other.support == 0 and other.evidence == []


def test_check_action_takes_filters(admin: Client, namespace: str) -> None:
    result = admin.check_action(namespace, S, "kick door", filters={"exclude_trajectory_ids": ["t0"]})
    assert (result.risk.failures, result.risk.attempts) == (0, 0)  # the merged exemplar cites t0: dropped


@pytest.mark.anyio
async def test_async_check_action(live_server: Any, namespace: str) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        result = await client.check_action(None, S, "kick door", task="open the door", k=20)
    assert_kick_door(result)


def test_episode_check_action_uses_the_episodes_current_state(admin: Client, namespace: str) -> None:
    with admin.episode(namespace, task="open the door") as ep:
        with pytest.raises(ValueError, match="no current state"):
            ep.check_action("kick door")
        ep.retrieve(S)
        assert_kick_door(ep.check_action("kick door"))  # the state of the retrieve
        unlock = ep.check_action("unlock door", observation=S, k=10)
        assert (unlock.risk.failures, unlock.risk.attempts, unlock.risk.rate) == (0, 2, 0.0)
        assert [a.action for a in unlock.alternatives] == ["kick door"]
        ep.step(S, "unlock door", result="The door opens.")
        ep.finish(success=True)
    assert len(ep.retrieval_ids) == 1  # the retrieve: a check is not tied to the episode
