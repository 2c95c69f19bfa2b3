"""Concurrent appends over real HTTP: 8 writers on their own trajectories and 4 on
one shared trajectory. No step is lost or duplicated; indexes stay contiguous."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.conftest import LiveServer

WRITERS_OWN = 8
WRITERS_SHARED = 4
BATCHES = 15
BATCH = 10


def _step(writer: int, batch: int, j: int) -> dict[str, Any]:
    return {"state": {"observation": f"w{writer} b{batch} s{j}"}, "action": f"act {writer}"}


def test_concurrent_appends_keep_every_step_once(live_server_any: LiveServer) -> None:
    h = {"Authorization": f"Bearer {live_server_any.admin_key}"}
    base = live_server_any.url + "/v1/namespaces/conc"
    with httpx.Client(headers=h, timeout=60) as c:
        assert c.post(live_server_any.url + "/v1/namespaces", json={"name": "conc"}).status_code == 201
        for i in range(WRITERS_OWN):
            assert c.post(f"{base}/trajectories", json={"id": f"own{i}", "task": "t"}).status_code == 201
        assert c.post(f"{base}/trajectories", json={"id": "shared", "task": "t"}).status_code == 201

    errors: list[str] = []
    start = threading.Barrier(WRITERS_OWN + WRITERS_SHARED)

    def write(writer: int, trajectory: str) -> None:
        with httpx.Client(headers=h, timeout=60) as c:
            start.wait()
            for b in range(BATCHES):
                r = c.post(
                    f"{base}/trajectories/{trajectory}/steps",
                    json={"steps": [_step(writer, b, j) for j in range(BATCH)]},
                )
                if r.status_code != 200:
                    errors.append(f"{writer}: {r.status_code} {r.text}")

    threads = [threading.Thread(target=write, args=(i, f"own{i}")) for i in range(WRITERS_OWN)]
    threads += [threading.Thread(target=write, args=(100 + i, "shared")) for i in range(WRITERS_SHARED)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    with httpx.Client(headers=h, timeout=60) as c:
        for i in range(WRITERS_OWN):
            steps = c.get(f"{base}/trajectories/own{i}").json()["steps"]
            assert [s["index"] for s in steps] == list(range(BATCHES * BATCH))
            assert [s["state"]["observation"] for s in steps] == [
                f"w{i} b{b} s{j}" for b in range(BATCHES) for j in range(BATCH)
            ]
        shared = c.get(f"{base}/trajectories/shared").json()
    steps = shared["steps"]
    assert shared["step_count"] == len(steps) == WRITERS_SHARED * BATCHES * BATCH
    assert [s["index"] for s in steps] == list(range(len(steps)))
    observations = [s["state"]["observation"] for s in steps]
    assert len(set(observations)) == len(observations)
    # Each request's batch landed as one contiguous, ordered run.
    for k in range(0, len(steps), BATCH):
        run = observations[k : k + BATCH]
        writer, batch = run[0].split()[:2]
        assert run == [f"{writer} {batch} s{j}" for j in range(BATCH)]
