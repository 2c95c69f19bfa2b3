"""``reflexa mcp`` driven by the MCP SDK's own client against a real Reflexa server.

Over stdio (``stdio_client`` launching ``reflexa mcp`` as a subprocess, configured by
environment variables) and over streamable HTTP (``streamable_http_client`` against
``reflexa mcp --transport http`` on a free port): the tools are listed; an episode is
logged and ended, then recalled as an exact match; an outcome credits the recalled
item, whose utility moves; a bad argument is a tool error naming it; the reflection
resources read back. With Reflexa down, end_episode reports the episode spooled, and
once Reflexa is back the server's upkeep delivers it. The API key never reaches the
server's stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from reflexa import Client  # noqa: E402

from migrations import upgrade  # noqa: E402
from tests.conftest import ADMIN_KEY, REPO, LiveServer, free_port, start_server  # noqa: E402
from tests.factories import unique  # noqa: E402

TOOLS = {"recall", "check_action", "log_step", "end_episode", "report_outcome", "search_reflections"}
PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "clients" / "python")])
MCP_ARGS = ["-m", "reflexa.cli", "mcp", "--flush-timeout", "1", "--retry-interval", "0.3", "--log-level", "INFO"]


def server_env(url: str, key: str, namespace: str, spool: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": PYTHONPATH,
        "REFLEXA_URL": url,
        "REFLEXA_API_KEY": key,
        "REFLEXA_NAMESPACE": namespace,
        "REFLEXA_SPOOL_PATH": str(spool),
    }


@asynccontextmanager
async def stdio_session(env: dict[str, str], errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=MCP_ARGS, env=env, cwd=str(REPO))
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def start_http_server(env: dict[str, str], errlog: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with errlog.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, *MCP_ARGS, "--transport", "http", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=err,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, errlog.read_text()
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return proc, f"http://127.0.0.1:{port}/mcp"
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("reflexa mcp --transport http did not listen within 30 s")


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def tool_error(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error
    text = result.content[0].text
    assert "Traceback" not in text
    return text


def utility_uses(client: Client, namespace: str, observation: str, item_id: str) -> int:
    result = client.retrieve(namespace, observation, k=10)
    return next(item.utility.uses for item in result.items if item.id == item_id)


async def exercise(session: ClientSession, reader: Client, namespace: str) -> None:
    """The whole tour, on one MCP session."""
    tools = await session.list_tools()
    assert {t.name for t in tools.tools} >= TOOLS
    for t in tools.tools:
        assert t.description and t.input_schema["type"] == "object"

    assert "No episode is open" in await tool_error(session, "end_episode", {"success": True})
    assert "`task`" in await tool_error(session, "log_step", {"observation": "o", "action": "a"})

    task = unique("cross the river")
    first = f"A river blocks the path ({task}); a rowing boat is tied to the bank."
    logged = await call(session, "log_step", {"task": task, "observation": first, "action": "untie the boat"})
    assert logged["started"] and logged["index"] == 0
    episode = logged["trajectory_id"]
    second = await call(session, "log_step", {"observation": "The boat is loose.", "action": "row across"})
    assert second == {"trajectory_id": episode, "index": 1, "started": False}
    ended = await call(session, "end_episode", {"success": True, "reward": 1.0})
    assert ended["status"] == "delivered" and ended["trajectory_id"] == episode and ended["sent"] == 2
    stored = reader.get_trajectory(namespace, episode)
    assert stored.status == "closed" and stored.outcome and stored.outcome.success is True

    recalled = await call(session, "recall", {"state": first, "task": task})
    top = recalled["items"][0]
    assert top["exact_match"] and "untie the boat" in top["text"]
    assert recalled["retrieval_id"] and "untie the boat" in recalled["context"]

    before = utility_uses(reader, namespace, first, top["id"])
    credited = await call(
        session,
        "report_outcome",
        {"retrieval_ids": [recalled["retrieval_id"]], "success": True, "item_ids": [top["id"]]},
    )
    assert credited["credited_items"] == 1
    deadline = time.monotonic() + 15
    while utility_uses(reader, namespace, first, top["id"]) == before and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert utility_uses(reader, namespace, first, top["id"]) > before

    # A known-bad action: two episodes that jumped in at the same state failed.
    for _ in range(2):
        await call(session, "log_step", {"task": task, "observation": first, "action": "jump in the river"})
        ended = await call(session, "end_episode", {"success": False, "failure_reason": "swept away"})
        assert ended["status"] == "delivered"
    checked = await session.call_tool("check_action", {"observation": first, "action": "jump in the river"})
    assert not checked.is_error and checked.structured_content is not None
    risk = checked.structured_content
    assert risk["risk"]["rate"] == 1.0 and risk["risk"]["attempts"] == 2 and risk["exact_match"]
    assert {e["success"] for e in risk["evidence"]} == {False} and len(risk["evidence"]) == 2
    assert risk["alternatives"][0]["action"] == "untie the boat"
    words = checked.content[0].text  # type: ignore[union-attr]
    assert words.startswith("Risk: 100% of credited attempts failed (2/2") and "- untie the boat: 100%" in words

    # A bad argument: the client's InvalidInput, in the tool's own words.
    text = await tool_error(session, "recall", {"state": first, "max_chars": 10})
    assert "`max_chars`" in text and "100" in text
    # A type the schema refuses: the SDK names the argument.
    assert "k" in await tool_error(session, "recall", {"state": first, "k": "many"})

    found = await call(session, "search_reflections", {"query": first})
    assert top["id"] in [r["id"] for r in found["reflections"]]

    reflection = await session.read_resource(f"reflexa://reflections/{top['id']}")
    body = json.loads(reflection.contents[0].text)
    assert body["id"] == top["id"] and body["utility"]["uses"] >= 1
    evidence = await session.read_resource(f"reflexa://reflections/{top['id']}/evidence")
    links = json.loads(evidence.contents[0].text)["evidence"]
    assert any(
        link["trajectory_id"] == episode and any(s["observation"] == first for s in link["steps"]) for link in links
    )


@pytest.fixture
def agent(live_server: LiveServer, admin: Client) -> tuple[str, str]:
    """A namespace of its own and an agent key for it."""
    namespace = admin.create_namespace(unique("mcp")).name
    return namespace, admin.create_key("agent", [namespace]).key


def test_over_stdio(live_server: LiveServer, admin: Client, agent: tuple[str, str], tmp_path: Path) -> None:
    namespace, key = agent
    env = server_env(live_server.url, key, namespace, tmp_path / "mcp.spool")
    errlog = tmp_path / "stderr.log"

    async def main() -> None:
        async with stdio_session(env, errlog) as session:
            await exercise(session, admin, namespace)

    asyncio.run(main())
    log = errlog.read_text()
    assert "Tool 'recall' failed" in log and key not in log  # logged at INFO, never the key


def test_over_streamable_http(live_server: LiveServer, admin: Client, agent: tuple[str, str], tmp_path: Path) -> None:
    namespace, key = agent
    errlog = tmp_path / "stderr.log"
    proc, url = start_http_server(server_env(live_server.url, key, namespace, tmp_path / "mcp.spool"), errlog)
    try:

        async def main() -> None:
            async with http_session(url) as session:
                await exercise(session, admin, namespace)
            # Episodes are per MCP session: a second session has none open.
            async with http_session(url) as other, http_session(url) as third:
                await call(other, "log_step", {"task": "t", "observation": "o", "action": "a"})
                assert "No episode is open" in await tool_error(third, "end_episode", {"success": False})
                assert (await call(other, "end_episode", {"success": False}))["status"] == "delivered"

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    log = errlog.read_text()
    assert "Tool 'recall' failed" in log and key not in log  # logged at INFO, never the key


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[tuple[str, list[LiveServer], Path]]:
    """A Reflexa on a fixed port with namespace ``spool``, stopped: the test brings it back."""
    db = f"sqlite:///{tmp_path / 'reflexa.db'}"
    upgrade(db)
    port = free_port()
    servers = [start_server(db, tmp_path / "data0", port=port, log=tmp_path / "s0.log")]
    with Client(servers[0].url, ADMIN_KEY) as admin:
        admin.create_namespace("spool")
    servers[0].stop()
    yield db, servers, tmp_path
    for server in servers:
        server.stop()


def test_an_episode_ended_while_reflexa_is_down_is_spooled_then_delivered(
    outage: tuple[str, list[LiveServer], Path],
) -> None:
    db, servers, root = outage
    url = servers[0].url
    spool = root / "mcp.spool"
    env = server_env(url, ADMIN_KEY, "spool", spool)

    async def main() -> str:
        async with stdio_session(env, root / "stderr.log") as session:
            logged = await call(session, "log_step", {"task": "t", "observation": "dark hall", "action": "go on"})
            ended = await call(session, "end_episode", {"success": False, "failure_reason": "fell in a pit"})
            assert ended["status"] == "spooled" and ended["spooled"] == 1 and ended["spool_path"] == str(spool)
            assert ended["trajectory_id"] == logged["trajectory_id"]
            # Reflexa comes back; the server's upkeep sends the spool without being asked.
            port = int(url.rsplit(":", 1)[1])
            servers.append(start_server(db, root / "data1", port=port, log=root / "s1.log"))
            deadline = time.monotonic() + 30
            while spool.exists() and spool.stat().st_size and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            return ended["trajectory_id"]

    episode = asyncio.run(main())
    with Client(url, ADMIN_KEY) as admin:
        stored = admin.get_trajectory("spool", episode)
    assert stored.status == "closed" and stored.step_count == 1
    assert stored.outcome and stored.outcome.failure_reason == "fell in a pit"


def test_the_example_agent(live_server: LiveServer, agent: tuple[str, str], tmp_path: Path) -> None:
    """examples/mcp_agent.py: its scripted chat runs end to end against the live server."""
    namespace, key = agent
    env = server_env(live_server.url, key, namespace, tmp_path / "mcp.spool")
    done = subprocess.run(
        [sys.executable, "-m", "examples.mcp_agent"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Nothing in memory matches this state yet." in out  # the first recall: an empty namespace
    assert "Started episode" in out and "delivered (2 steps" in out
    assert "exact match" in out  # the second recall finds the episode just logged
    assert re.search(r"Outcome recorded for 1 retrieval\(s\); [12] item\(s\) credited\.", out)  # both served steps
    assert "> check_action(" in out and "No credited attempt of this action in states like this" in out
    assert key not in out + done.stderr
