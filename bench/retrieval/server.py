"""The server process bench.retrieval measures, and the request bodies it sends."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import REPO
from bench.common import api
from bench.common.processes import OFFLINE_ENV, free_port, share_models, stop_group, wait_healthy
from bench.retrieval.config import ID_PREFIX, K


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    start_s: float
    stop_s: float = float("nan")

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.contextmanager
def serve(url: str, key: str, data_dir: Path, *, worker: bool, stop_timeout_s: float = 900.0) -> Iterator[Server]:
    """A real uvicorn process like `reflexa serve`, in its own process group. Stopping
    waits for the lifespan to finish (it saves the index snapshot, which at 1M items
    takes longer than stop_group's 10 s grace), then kills the group."""
    share_models(data_dir)
    port = free_port()
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "REFLEXA_DATA_DIR": str(data_dir),
        "REFLEXA_DATABASE_URL": url,
        "REFLEXA_ADMIN_KEY": key,
        "REFLEXA_WORKER__IN_PROCESS": "true" if worker else "false",
    }
    cmd = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    log = data_dir / "server.log"
    started = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", proc, data_dir, 0.0)
    try:
        wait_healthy(proc, server.url, log, timeout=300)
        server.start_s = time.perf_counter() - started
        yield server
    finally:
        stopping = time.perf_counter()
        stop_group(proc, grace_s=stop_timeout_s)
        server.stop_s = time.perf_counter() - stopping


def retrieve_body(text: str, **extra: Any) -> bytes:
    return api.retrieve_body(text, K, **extra)


def item_index(item_id: str) -> int:
    return int(item_id[len(ID_PREFIX) :]) if item_id.startswith(ID_PREFIX) else -1


def cache_counts(client: httpx.Client) -> tuple[int, int]:
    """(hits, misses) of the server's embedding cache, from /metrics."""
    hits = misses = -1
    with contextlib.suppress(httpx.HTTPError, ValueError):
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("reflexa_embedding_cache_total"):
                value = int(float(line.rsplit(" ", 1)[1]))
                if 'result="hit"' in line:
                    hits = value
                elif 'result="miss"' in line:
                    misses = value
    return hits, misses
