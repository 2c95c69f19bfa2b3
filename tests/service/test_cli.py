"""The server commands of `reflexa`, run as a user would: as processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port

REFLEXA = str(Path(sys.executable).with_name("reflexa"))


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([REFLEXA, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_db_upgrade_current_and_keys_create(database_url: str, tmp_path: Path) -> None:
    env = {"REFLEXA_DATABASE_URL": database_url}
    # database_url is already migrated: upgrade is a no-op and current says so.
    assert run("db", "upgrade", env=env).returncode == 0
    cur = run("db", "current", env=env)
    assert cur.returncode == 0 and json.loads(cur.stdout)["up_to_date"] is True
    made = run("keys", "create", "--role", "agent", "--namespace", "a", "--namespace", "b", env=env)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["role"] == "agent" and key["namespaces"] == ["a", "b"] and key["key"].startswith("rfx_")
    bad = run("keys", "create", "--role", "agent", "--namespace", "Not Valid", env=env)
    assert bad.returncode == 2 and "namespaces[0]" in bad.stderr


def test_db_current_reports_an_empty_database(tmp_path: Path) -> None:
    cur = run("db", "current", env={"REFLEXA_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"})
    assert cur.returncode == 1 and json.loads(cur.stdout)["up_to_date"] is False


def test_serve_on_embedded_defaults(tmp_path: Path) -> None:
    """`reflexa serve` with nothing configured: migrates SQLite under the data dir,
    prints an admin key once, and serves the API with it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLEXA_")}
    proc = subprocess.Popen(
        [REFLEXA, "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        key = None
        deadline = time.monotonic() + 60
        while key is None and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            lines.append(line)
            if "store it now):" in line:
                key = line.split("store it now):")[1].strip()
        assert key, "".join(lines)
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(url + "/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        h = {"Authorization": f"Bearer {key}"}
        assert httpx.post(url + "/v1/namespaces", json={"name": "demo"}, headers=h).status_code == 201
        assert (tmp_path / "reflexa-data" / "reflexa.db").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
