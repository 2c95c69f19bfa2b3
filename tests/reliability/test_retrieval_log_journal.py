"""The retrieval log is written after a retrieve's answer is sent (journaled first:
service/retrieval/log.py). Real uvicorn processes on one SQLite database: while the
test holds SQLite's write lock, a server answers retrieves whose log rows cannot be
written yet; then

- a server killed with SIGKILL before writing them loses nothing: the next process to
  start replays its journal, rows and times as served;
- an outcome reported to another, running process waits for the first one's write
  (the first one stopped with SIGSTOP meanwhile), or replays the journal of a first
  one that was killed, and credits what was served.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from migrations import upgrade
from store.models import Retrieval, RetrievalItem
from tests.conftest import ADMIN_KEY, LiveServer, start_server

pytestmark = pytest.mark.slow
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
NS = "journal"


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    upgrade(url)
    return url


@contextmanager
def write_lock(url: str) -> Iterator[None]:
    """SQLite's write lock, held by the test: readers go on, writers wait."""
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def seeded(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, headers=HEADERS, timeout=30) as http:
        assert http.post("/v1/namespaces", json={"name": NS}).status_code == 201
        steps = [{"state": {"observation": f"room {i} with a red door"}, "action": f"open {i}"} for i in range(3)]
        r = http.post(
            f"/v1/namespaces/{NS}/trajectories",
            json={"id": "seed", "task": "doors", "steps": steps, "outcome": {"success": True}},
        )
        assert r.status_code == 201, r.text
        token = r.json()["consistency_token"]
        r = http.post(
            f"/v1/namespaces/{NS}/retrieve",
            json={"state": {"observation": "room 1"}, "consistency_token": token, "wait_timeout_ms": 30_000},
        )
        assert r.status_code == 200 and r.json()["items"], r.text


def retrieve(server: LiveServer, trajectory_id: str | None = None) -> dict:
    body = {"state": {"observation": "room 1 with a red door"}, "k": 3, "trajectory_id": trajectory_id}
    r = httpx.post(f"{server.url}/v1/namespaces/{NS}/retrieve", json=body, headers=HEADERS, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def logged(url: str, rid: str) -> tuple[Retrieval | None, list[tuple[int, float]]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(Retrieval).where(Retrieval.id == rid)).first()
            items = conn.execute(
                select(RetrievalItem.rank, RetrievalItem.score)
                .where(RetrievalItem.retrieval_id == rid)
                .order_by(RetrievalItem.rank)
            ).all()
            return row, [(rank, score) for rank, score in items]
    finally:
        engine.dispose()


def kill(server: LiveServer) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(30)


def stop(server: LiveServer) -> None:
    """SIGSTOP, returning once every thread of the server has stopped: `kill(2)` returns
    before that, and a thread that has not stopped yet could still write."""
    os.kill(server.process.pid, signal.SIGSTOP)
    _, status = os.waitpid(server.process.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), status


def test_a_killed_server_s_answered_retrievals_are_replayed_by_the_next_start(database: str, tmp_path: Path) -> None:
    first = start_server(database, tmp_path, log=tmp_path / "first.log")
    try:
        seeded(first)
        with write_lock(database):
            answers = [retrieve(first, trajectory_id="ep") for _ in range(3)]
            kill(first)  # before any of the three log writes could commit
        for a in answers:
            assert logged(database, a["retrieval_id"])[0] is None
        assert list((tmp_path / "retrieval-journal").glob("*/*.jsonl"))
    finally:
        first.stop()

    second = start_server(database, tmp_path, log=tmp_path / "second.log")
    try:
        for a in answers:  # replayed at the start, as they were served
            row, items = logged(database, a["retrieval_id"])
            assert row is not None and row.trajectory_id == "ep" and row.namespace == NS
            assert items == [(i, item["score"]) for i, item in enumerate(a["items"])]
        assert not [p for p in (tmp_path / "retrieval-journal").glob("*/*.jsonl") if p.stat().st_size]
        r = httpx.post(
            f"{second.url}/v1/namespaces/{NS}/retrievals/{answers[0]['retrieval_id']}/outcome",
            json={"success": True, "item_ids": [answers[0]["items"][0]["id"]]},
            headers=HEADERS,
        )
        assert r.status_code == 200 and r.json()["credited_items"] == 1, r.text
    finally:
        second.stop()


def outcome(server: LiveServer, rid: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/namespaces/{NS}/retrievals/{rid}/outcome",
        json={"success": True},
        headers=HEADERS,
        timeout=30,
    )


@pytest.fixture
def two_servers(database: str, tmp_path: Path) -> Iterator[tuple[LiveServer, LiveServer]]:
    """A seeded first server and a second one on the same database and data directory."""
    first = start_server(database, tmp_path, log=tmp_path / "first.log")
    second = None
    try:
        seeded(first)
        second = start_server(database, tmp_path, log=tmp_path / "second.log")
        yield first, second
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_an_outcome_at_another_process_waits_for_the_write(
    database: str, two_servers: tuple[LiveServer, LiveServer]
) -> None:
    first, second = two_servers
    result: list[httpx.Response] = []
    with write_lock(database):
        answer = retrieve(first)
        stop(first)  # alive, its log write not made (and not made while the lock is let go)
    try:
        assert logged(database, answer["retrieval_id"])[0] is None
        asker = threading.Thread(target=lambda: result.append(outcome(second, answer["retrieval_id"])))
        asker.start()
        time.sleep(1.0)
        assert not result  # not a 404: the second server waits for the first one's write
    finally:
        os.kill(first.process.pid, signal.SIGCONT)
    asker.join(30)
    assert result[0].status_code == 200 and result[0].json()["credited_items"] >= 1, result[0].text


def test_an_outcome_at_another_process_replays_a_killed_one_s_journal(
    database: str, two_servers: tuple[LiveServer, LiveServer]
) -> None:
    first, second = two_servers
    with write_lock(database):
        answer = retrieve(first)
        kill(first)
    assert logged(database, answer["retrieval_id"])[0] is None
    r = outcome(second, answer["retrieval_id"])
    assert r.status_code == 200 and r.json()["credited_items"] >= 1, r.text
    row, items = logged(database, answer["retrieval_id"])
    assert row is not None and items == [(i, item["score"]) for i, item in enumerate(answer["items"])]
