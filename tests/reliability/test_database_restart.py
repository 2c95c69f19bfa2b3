"""A PostgreSQL restart in the middle of traffic is survived. The test starts a
private cluster of its own (initdb / pg_ctl, its own port and socket directory: the
machine's server is untouched), a real API server with its in-process worker on it,
and agents writing and reading; it stops PostgreSQL for a few seconds and starts it
again. During the outage answers are 503 with Retry-After (never a 500, never a hang
past the client's timeout); nothing acknowledged is lost; the service recovers by
itself (no restart), and its worker finishes every job."""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select, text

from migrations import upgrade
from store.models import Job, Trajectory
from tests.conftest import ADMIN_KEY, free_port, start_server

pytestmark = pytest.mark.slow
BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _as_postgres(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True, timeout=120)


@pytest.fixture
def private_postgres() -> Iterator[tuple[str, Callable[[str], None]]]:
    if not BIN or not shutil.which("runuser"):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) and runuser are needed")
    bindir = BIN[-1]
    root = Path(tempfile.mkdtemp(prefix="reflexa-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    shutil.chown(root, "postgres")
    shutil.chown(sockets, "postgres")
    init = _as_postgres(f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
    assert init.returncode == 0, init.stderr
    port = free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = root / "postgres.log"

    def pg_ctl(action: str) -> None:
        args = [f"{bindir}/pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60"]
        args += ["-o", options, action] if action == "start" else ["-m", "fast", action]
        done = _as_postgres(*args)
        assert done.returncode == 0, done.stderr + log.read_text()[-2000:]

    shutil.chown(root, "postgres")
    pg_ctl("start")
    admin = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("CREATE DATABASE reflexa"))
    admin.dispose()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/reflexa", pg_ctl
    finally:
        _as_postgres(f"{bindir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_a_postgres_restart_is_survived_with_503s_and_nothing_lost(
    private_postgres: tuple[str, Callable[[str], None]], tmp_path: Path
) -> None:
    url, pg_ctl = private_postgres
    upgrade(url)
    # A job whose completion could not be written waits out its lease, then runs again.
    env = {"REFLEXA_WORKER__LEASE_SECONDS": "3"}
    server = start_server(url, tmp_path, env=env, log=tmp_path / "server.log", port=free_port())
    acked: dict[str, int] = {}
    statuses: Counter[int] = Counter()
    retry_after: set[str] = set()
    rules: Counter[str] = Counter()  # the 503s' rules: a stopped server is an outage, not an overload
    stop = threading.Event()
    lock = threading.Lock()

    def agent(name: str) -> None:
        n = 0
        with httpx.Client(base_url=server.url, headers=HEADERS, timeout=15) as http:
            while not stop.is_set():
                n += 1
                body = {
                    "id": f"{name}-{n}",
                    "task": "t",
                    "steps": [{"state": {"observation": f"{name} {n}"}, "action": "a"}],
                    "outcome": {"success": True},
                }
                while not stop.is_set():  # the same body until it is acknowledged: idempotent
                    try:
                        r = http.post("/v1/namespaces/restart/trajectories", json=body)
                    except httpx.TransportError:
                        time.sleep(0.2)
                        continue
                    with lock:
                        statuses[r.status_code] += 1
                        if r.status_code == 503:
                            retry_after.add(r.headers.get("retry-after", ""))
                            rules[r.json()["error"]["rule"]] += 1
                    if r.status_code in (200, 201):
                        with lock:
                            acked[body["id"]] = 1
                        break
                    time.sleep(0.2)
                http.post("/v1/namespaces/restart/retrieve", json={"state": {"observation": f"{name} {n}"}, "k": 1})

    try:
        assert httpx.post(f"{server.url}/v1/namespaces", json={"name": "restart"}, headers=HEADERS).status_code == 201
        threads = [threading.Thread(target=agent, args=(f"a{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(3)
        before = len(acked)
        pg_ctl("stop")
        time.sleep(4)  # requests now meet a database that is not there
        during = dict(statuses)
        pg_ctl("start")
        time.sleep(6)  # and the service comes back by itself
        stop.set()
        for t in threads:
            t.join(30)
        assert before > 0 and len(acked) > before  # writes went on after the restart
        assert statuses[500] == 0 and during.get(503, 0) > 0 and retry_after == {"1"}, (dict(statuses), retry_after)
        assert set(rules) == {"database_unavailable"}, rules
        deadline = time.monotonic() + 60
        engine = create_engine(url)
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                busy = conn.scalar(select(func.count()).select_from(Job).where(Job.status.in_(("queued", "running"))))
            if not busy:
                break
            time.sleep(0.5)
        with engine.connect() as conn:
            stored = set(conn.scalars(select(Trajectory.id).where(Trajectory.namespace == "restart")))
            failed = conn.scalar(select(func.count()).select_from(Job).where(Job.status == "failed"))
            busy = conn.scalar(select(func.count()).select_from(Job).where(Job.status.in_(("queued", "running"))))
        engine.dispose()
        assert set(acked) <= stored  # nothing acknowledged was lost
        assert busy == 0 and failed == 0  # the worker recovered too
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        print(f"\nrestart: {dict(statuses)} answers, {len(acked)} acknowledged ({before} before the stop)")
    finally:
        stop.set()
        server.stop()
