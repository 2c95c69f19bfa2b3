"""The episode logger's local spool: a server away for longer than the flush
timeout loses no step. Against real uvicorn servers: steps logged while the server
is down are kept in the spool, and once a server is back on the same database every
step arrives exactly once (also when the spool is replayed twice), by
`client.flush_spool()`, by a client starting with the same spool, or `reflexa flush`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from reflexa import Client

from migrations import upgrade
from tests.conftest import ADMIN_KEY, REPO, LiveServer, free_port, start_server

STEPS_UP, STEPS_DOWN = 30, 70
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Outage:
    """A server on a fixed port that a test can stop and bring back on the same database."""

    db_url: str
    root: Path
    port: int
    servers: list[LiveServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        n = len(self.servers)
        self.servers.append(
            start_server(self.db_url, self.root / f"data{n}", port=self.port, log=self.root / f"s{n}.log")
        )

    def stop(self) -> None:
        self.servers[-1].stop()


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[Outage]:
    url = f"sqlite:///{tmp_path / 'reflexa.db'}"
    upgrade(url)
    o = Outage(url, tmp_path, free_port())
    o.start()
    assert httpx.post(f"{o.url}/v1/namespaces", json={"name": "spool"}, headers=HEADERS).status_code == 201
    yield o
    for server in o.servers:
        server.stop()


def _client(outage: Outage, spool: Path, **kwargs: Any) -> Client:
    return Client(
        outage.url, ADMIN_KEY, namespace="spool", spool_path=str(spool), max_retries=1, backoff=0.05, **kwargs
    )


def _log_through_an_outage(client: Client, outage: Outage, episode_id: str) -> None:
    """30 steps while the server is up, then it goes away: 70 more and the outcome."""
    ep = client.episode(task="walk the hall", id=episode_id, flush_timeout=1.0, batch_size=10, flush_interval=0.02)
    for i in range(STEPS_UP):
        ep.step(f"hall, door {i} to the left", f"go {i}")
    deadline = time.monotonic() + 10
    while ep.stats.sent < STEPS_UP and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ep.stats.sent == STEPS_UP
    outage.stop()
    for i in range(STEPS_UP, STEPS_UP + STEPS_DOWN):
        ep.step(f"hall, door {i} to the left", f"go {i}")
    ep.finish(success=True, reward=1.0)
    stats = ep.close()
    assert (stats.sent, stats.spooled, stats.failed, stats.dropped) == (STEPS_UP, STEPS_DOWN, 0, 0)
    assert stats.outcome == "spooled" and not stats.delivered


def _assert_exactly_once(outage: Outage, episode_id: str) -> None:
    r = httpx.get(f"{outage.url}/v1/namespaces/spool/trajectories/{episode_id}", headers=HEADERS)
    assert r.status_code == 200, r.text
    t = r.json()
    total = STEPS_UP + STEPS_DOWN
    assert t["step_count"] == total and t["status"] == "closed" and t["outcome"]["success"] is True
    assert [s["index"] for s in t["steps"]] == list(range(total))
    assert [s["action"] for s in t["steps"]] == [f"go {i}" for i in range(total)]


def test_an_outage_longer_than_the_flush_timeout_loses_no_step(outage: Outage) -> None:
    spool = outage.root / "agent.spool"
    with _client(outage, spool) as client:
        _log_through_an_outage(client, outage, "ep-outage")
        kept = spool.read_bytes()
        assert client._spool is not None and client._spool.pending() >= 2  # appends, then the outcome
        # While the server is still away, a flush sends nothing and keeps everything.
        assert client.flush_spool().left == client._spool.pending()
        outage.start()
        report = client.flush_spool()
        assert (report.sent_steps, report.dropped, report.left) == (STEPS_DOWN, 0, 0)
        _assert_exactly_once(outage, "ep-outage")
        # The same spool replayed again (a crash after sending, before the rewrite): still once.
        spool.write_bytes(kept)
        again = client.flush_spool()
        assert (again.left, again.dropped) == (0, 0)
        _assert_exactly_once(outage, "ep-outage")


def test_a_client_starting_with_a_spool_sends_it_in_the_background(outage: Outage) -> None:
    spool = outage.root / "agent.spool"
    with _client(outage, spool) as client:
        _log_through_an_outage(client, outage, "ep-restart")
    outage.start()
    with _client(outage, spool) as restarted:  # the next run of the agent
        deadline = time.monotonic() + 15
        while restarted._spool is not None and restarted._spool.pending() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert restarted._spool is not None and restarted._spool.pending() == 0
    _assert_exactly_once(outage, "ep-restart")


def test_reflexa_flush_sends_the_spool(outage: Outage) -> None:
    spool = outage.root / "agent.spool"
    with _client(outage, spool) as client:
        _log_through_an_outage(client, outage, "ep-cli")
    command = [sys.executable, "-m", "reflexa.cli", "flush", "--spool", str(spool), "--url", outage.url]
    env = {**os.environ, "REFLEXA_API_KEY": ADMIN_KEY}
    away = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert away.returncode == 1 and json.loads(away.stdout)["left"] >= 2  # still away: nothing lost
    outage.start()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sent_steps"] == STEPS_DOWN
    _assert_exactly_once(outage, "ep-cli")


def test_a_full_spool_keeps_what_fits_and_counts_the_rest_as_failed(outage: Outage) -> None:
    spool = outage.root / "small.spool"
    with _client(outage, spool, spool_max_bytes=2_500) as client:
        ep = client.episode(task="t", id="ep-full", flush_timeout=0.5, batch_size=10, flush_interval=0.02)
        outage.stop()
        for i in range(40):
            ep.step(f"room {i}", f"go {i}")
        stats = ep.close()
        assert 0 < stats.spooled < 40 and stats.spooled + stats.failed == 40
        assert spool.stat().st_size <= 2_500
