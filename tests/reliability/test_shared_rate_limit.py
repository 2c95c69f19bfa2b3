"""A key's request rate holds across API processes: two uvicorn processes on one
PostgreSQL admit the configured rate in total (the shared bucket), where buckets
per process admit about twice it (docs/reliability.md, "Per-key limits")."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import httpx
import pytest

from migrations import upgrade
from tests.conftest import ADMIN_KEY, start_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
RATE, BURST = 10, 10
SECONDS = 6.0


def hammer(urls: list[str], seconds: float) -> tuple[int, int, float]:
    """Four clients send GET /v1/namespaces with one key, alternating the processes,
    as fast as they are answered. Returns (admitted, refused, seconds from the first
    request sent to the last: a request is admitted or refused as it arrives, so a
    slow answer's tail is not time the bucket refilled for)."""
    counts = {200: 0, 429: 0}
    lock = threading.Lock()
    turn = itertools.cycle(urls)
    for url in urls:  # warm (no credential: the limit is not touched)
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    start = time.monotonic()
    last_sent = [start]

    def client() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30) as http:
            while time.monotonic() - start < seconds:
                with lock:
                    url = next(turn)
                    last_sent[0] = time.monotonic()
                r = http.get(f"{url}/v1/namespaces")
                assert r.status_code in counts, r.text
                with lock:
                    counts[r.status_code] += 1

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    return counts[200], counts[429], last_sent[0] - start


@pytest.mark.parametrize("scope", ["shared", "process"])
def test_two_processes_admit_the_rate_in_total(scope: str, tmp_path: Path, pg_databases: object) -> None:
    url = pg_databases.create()  # type: ignore[attr-defined]
    upgrade(url)
    env = {
        "REFLEXA_LIMITS__REQUESTS_PER_SECOND_PER_KEY": str(RATE),
        "REFLEXA_LIMITS__REQUEST_BURST_PER_KEY": str(BURST),
        "REFLEXA_LIMITS__KEY_LIMITS_SCOPE": scope,
    }
    servers = [start_server(url, tmp_path / f"api{i}", env=env) for i in range(2)]
    try:
        admitted, refused, elapsed = hammer([s.url for s in servers], SECONDS)
    finally:
        for s in servers:
            s.stop()
    allowed = BURST + RATE * elapsed  # one bucket: the burst, then the rate
    assert refused > admitted  # the clients asked for far more than the limit
    if scope == "shared":
        assert 0.9 * allowed <= admitted <= 1.1 * allowed, (admitted, allowed)
    else:  # each process its own bucket: about twice the limit
        assert admitted > 1.6 * allowed, (admitted, allowed)


def test_without_its_database_a_process_falls_back_to_its_own_bucket() -> None:
    """The shared bucket cannot be asked (nothing listens there): the key is limited
    by this process's own bucket, not let through unlimited and not refused."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from service.limits.per_key import KeyLimitMiddleware
    from store.database import Database
    from tests.conftest import free_port

    down = Database(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x?connect_timeout=2")
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    limited = KeyLimitMiddleware(app, rate=0.01, burst=2, max_concurrent=0, shared=lambda: down)
    try:
        with TestClient(limited, headers={"Authorization": "Bearer k"}) as http:
            assert [http.get("/").status_code for _ in range(3)] == [200, 200, 429]
    finally:
        down.dispose()
