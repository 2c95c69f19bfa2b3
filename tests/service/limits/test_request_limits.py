"""Per-key abuse limits (rate and concurrency: 429 with Retry-After, counted in
/metrics), the slow-body timeout (408), request ids on every response and log
line, and no secret in any log line, error message or metric."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from migrations import upgrade
from service.app import create_app
from tests.conftest import ADMIN_KEY, make_settings, start_server
from tests.fixtures import create_namespace


@pytest.fixture
def sqlite_url(sqlite_url: str) -> str:
    """The conftest's SQLite file, migrated (these limits do not depend on the engine)."""
    upgrade(sqlite_url)
    return sqlite_url


def _api(database_url: str, tmp_path: Path, **limits: Any) -> TestClient:
    settings = make_settings(database_url, tmp_path, limits=limits)
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"})


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_a_key_over_its_rate_gets_429_with_retry_after(sqlite_url: str, tmp_path: Path) -> None:
    with _api(sqlite_url, tmp_path, requests_per_second_per_key=0.5, request_burst_per_key=3) as api:
        codes = [api.get("/v1/namespaces").status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        r = api.get("/v1/namespaces")
        assert r.status_code == 429
        assert r.headers["retry-after"] == "2"  # one token per 2 s
        err = r.json()["error"]
        assert (err["type"], err["field"], err["rule"]) == (
            "rate_limited",
            "authorization",
            "requests_per_second_per_key",
        )
        assert ADMIN_KEY not in r.text
        # Another key has its own bucket; callers without a key are not limited here.
        assert api.get("/v1/namespaces", headers={"Authorization": "Bearer rfx_other"}).status_code == 401
        assert api.get("/healthz", headers={"Authorization": ""}).status_code == 200
        metrics = api.get("/metrics", headers={"Authorization": ""}).text
        assert _metric(metrics, 'reflexa_rate_limited_total{rule="requests_per_second_per_key"}') == 1
        time.sleep(2.1)
        assert api.get("/v1/namespaces").status_code == 200


def _slow_body(url: str, key: str, path: str) -> socket.socket:
    """A request whose body never finishes arriving (a slow client)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        ).encode()
    )
    return sock


def test_slow_bodies_time_out_and_in_flight_requests_are_bounded(sqlite_url: str, tmp_path: Path) -> None:
    env = {"REFLEXA_LIMITS__BODY_TIMEOUT_SECONDS": "1.5", "REFLEXA_LIMITS__MAX_CONCURRENT_REQUESTS_PER_KEY": "1"}
    server = start_server(sqlite_url, tmp_path, env=env, log=tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
            assert api.post("/v1/namespaces", json={"name": "slow"}).status_code == 201
            sock = _slow_body(server.url, ADMIN_KEY, "/v1/namespaces/slow/trajectories")
            time.sleep(0.3)
            # The slow request holds this key's one slot: the next is refused, not queued.
            r = api.get("/v1/namespaces")
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["rule"] == "max_concurrent_requests_per_key"
            sock.settimeout(5)
            answer = ""
            while not answer.endswith("}}"):  # headers and the JSON body may come in two reads
                chunk = sock.recv(4096).decode()
                if not chunk:
                    break
                answer += chunk
            assert answer.startswith("HTTP/1.1 408"), answer[:200]
            assert "body_timeout_seconds" in answer and "x-request-id" in answer.lower()
            sock.close()
            assert api.get("/v1/namespaces").status_code == 200  # the slot is free again
            assert api.get("/v1/namespaces/slow/trajectories").json()["items"] == []  # nothing half-written
    finally:
        server.stop()


def test_every_response_has_a_request_id_and_a_clients_own_is_kept(client: TestClient) -> None:
    a, b = client.get("/healthz"), client.get("/v1/namespaces/nope")
    assert len(a.headers["x-request-id"]) == 32 and a.headers["x-request-id"] != b.headers["x-request-id"]
    assert client.get("/healthz", headers={"X-Request-ID": "trainer-run-7:step-3"}).headers["x-request-id"] == (
        "trainer-run-7:step-3"
    )
    forged = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"}).headers["x-request-id"]
    assert len(forged) == 32 and " " not in forged
    assert client.post("/v1/namespaces", content=b"x" * 10, headers={"content-type": "application/json"}).headers[
        "x-request-id"
    ]


def test_an_unexpected_error_is_logged_with_its_request_id_and_answered_without_internals(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    services = client.app.state.services  # type: ignore[attr-defined]

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("internal detail: password=hunter2")

    monkeypatch.setattr(services.namespaces, "list", broken)
    with caplog.at_level(logging.ERROR, logger="reflexa"):
        r = client.get("/v1/namespaces", headers={"X-Request-ID": "req-42"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-42"
    assert "hunter2" not in r.text and "req-42" in r.text
    record = next(rec for rec in caplog.records if "unhandled RuntimeError" in rec.getMessage())
    assert record.request_id == "req-42"  # type: ignore[attr-defined]


def test_no_secret_reaches_a_log_line_an_error_or_a_metric(sqlite_url: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = start_server(sqlite_url, tmp_path, log=log)
    secrets: list[str] = [ADMIN_KEY]
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
            create_namespace(api, "sec")  # type: ignore[arg-type]
            created = api.post("/v1/keys", json={"role": "agent", "namespaces": ["sec"]}).json()
            secrets.append(created["key"])
            rotated = api.post(f"/v1/keys/{created['id']}/rotate", json={"grace_seconds": 0}).json()
            secrets.append(rotated["key"])
            wrong = "rfx_" + "w" * 43
            secrets.append(wrong)
            answers = [
                httpx.get(f"{server.url}/v1/namespaces", headers={"Authorization": f"Bearer {wrong}"}),
                httpx.get(f"{server.url}/v1/namespaces", headers={"Authorization": f"Bearer {created['key']}"}),
                httpx.get(f"{server.url}/v1/namespaces", headers={"Authorization": f"Basic {created['key']}"}),
                api.get("/v1/keys"),
                api.get("/metrics"),
                api.get("/readyz"),
            ]
        server.stop()
        text = log.read_text() + "".join(a.text for a in answers)
        for secret in secrets:
            assert secret not in text
            assert secret[4:20] not in text  # nor a recognisable piece of it
    finally:
        server.stop()


def test_the_limits_run_concurrently_without_losing_count(sqlite_url: str, tmp_path: Path) -> None:
    """Many threads on one key: exactly the burst gets through before the bucket empties."""
    with _api(sqlite_url, tmp_path, requests_per_second_per_key=0.001, request_burst_per_key=20) as api:
        codes: list[int] = []
        lock = threading.Lock()

        def hit() -> None:
            code = api.get("/healthz").status_code
            with lock:
                codes.append(code)

        threads = [threading.Thread(target=hit) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes.count(200) == 20 and codes.count(429) == 20
