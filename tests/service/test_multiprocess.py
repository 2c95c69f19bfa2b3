"""Two API processes and a separate worker process on one database: what the
worker writes becomes searchable on both replicas (at once with a consistency
token, within the sync interval without one), and deletes disappear on both."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.conftest import ADMIN_KEY, LiveServer, start_server, start_worker

H = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _retrieve(server: LiveServer, obs: str, **extra: object) -> dict:
    r = httpx.post(
        f"{server.url}/v1/namespaces/multi/retrieve",
        json={"state": {"observation": obs}, **extra},
        headers=H,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_replicas_see_the_workers_writes(database_url: str, tmp_path: Path) -> None:
    env = {"REFLEXA_WORKER__IN_PROCESS": "false"}
    a = start_server(database_url, tmp_path / "a", env=env, log=tmp_path / "a.log")
    b = start_server(database_url, tmp_path / "b", env=env, log=tmp_path / "b.log")
    worker = start_worker(database_url, tmp_path / "w", log=tmp_path / "worker.log", args=["--concurrency", "2"])
    try:
        assert httpx.post(f"{a.url}/v1/namespaces", json={"name": "multi"}, headers=H).status_code == 201
        # Both replicas have looked at the (empty) namespace: their indexes are loaded.
        assert _retrieve(a, "anything")["items"] == _retrieve(b, "anything")["items"] == []
        body = {
            "id": "t1",
            "task": "t",
            "steps": [{"state": {"observation": "a red door in a stone hall"}, "action": "open door"}],
            "outcome": {"success": True},
        }
        token = httpx.post(f"{a.url}/v1/namespaces/multi/trajectories", json=body, headers=H).json()[
            "consistency_token"
        ]
        for server in (b, a):
            items = _retrieve(server, "a red door in a stone hall", consistency_token=token, wait_timeout_ms=30_000)[
                "items"
            ]
            assert [i["content"]["action"] for i in items] == ["open door"]
        assert httpx.delete(f"{a.url}/v1/namespaces/multi/trajectories/t1", headers=H).status_code == 200
        deadline = time.monotonic() + 30
        while _retrieve(b, "a red door in a stone hall")["items"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _retrieve(b, "a red door in a stone hall")["items"] == []
        assert _retrieve(a, "a red door in a stone hall")["items"] == []
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        a.stop()
        b.stop()
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
