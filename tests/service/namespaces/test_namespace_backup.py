"""`reflexa export` / `reflexa import`: a namespace round-trips exactly between
SQLite and PostgreSQL, in both directions (every row of every exported table
compared, surrogate keys by their order), and the imported namespace serves; a
refused import changes nothing; `reflexa db backup` copies a live SQLite database."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from migrations import upgrade
from service.app import create_app
from service.namespaces.backup import backup_sqlite, export_namespace, import_namespace
from service.namespaces.repository import BY_NAME, BackupError
from store.database import Database
from store.models import Base
from tests.conftest import ADMIN_KEY, REPO, make_settings
from tests.fixtures import drain
from tests.service.test_unstorable_input import BODIES
from tests.ui.seed import add_retrievals, seed

pytestmark = pytest.mark.postgres


def _app(url: str, tmp: Path) -> TestClient:
    return TestClient(create_app(make_settings(url, tmp)), headers={"Authorization": f"Bearer {ADMIN_KEY}"})


@pytest.fixture
def source(tmp_path: Path) -> Iterator[str]:
    """A SQLite database with a namespace that has a bit of everything."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    upgrade(url)
    with _app(url, tmp_path / "a") as api:
        s = seed(api, "kept", episodes=6)
        seed(api, "neighbour", episodes=2)  # must not leak into the export
        drain(api)
        add_retrievals(api, s)
        ref = api.get("/v1/namespaces/kept/reflections", params={"kind": "exemplar"}).json()["items"][0]
        api.patch(f"/v1/namespaces/kept/reflections/{ref['id']}", json={"text": "edited", "note": "clearer"})
        api.patch(f"/v1/namespaces/kept/reflections/{ref['id']}", json={"status": "retired", "note": "gone"})
        assert api.post("/v1/namespaces/kept/snapshots", json={"id": "before-delete"}).status_code == 201
        api.delete(f"/v1/namespaces/kept/trajectories/{s.trajectories[0]}")  # the snapshot now cites deleted rows
        assert api.post("/v1/namespaces/kept/rubrics", json=BODIES["create_rubric"]).status_code == 201
        assert api.post("/v1/namespaces/kept/rubrics/r1/capabilities", json={"note": "rl"}).status_code == 201
        drain(api)
    yield url


def _export(url: str, ns: str = "kept") -> bytes:
    db = Database(url)
    out = io.BytesIO()
    export_namespace(db, ns, out)
    db.dispose()
    return out.getvalue()


def _import(url: str, data: bytes) -> dict[str, int]:
    db = Database(url)
    try:
        return import_namespace(db, io.BytesIO(data)).rows
    finally:
        db.dispose()


def normalized(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The export with surrogate keys replaced by their order in it (what an import
    may renumber), references followed the same way, the export time dropped."""
    records = [json.loads(line) for line in data.splitlines()]
    header, rows = records[0], records[1:]
    assert header["namespace"] == "kept"
    rank: dict[str, dict[int, int]] = {}
    out = []
    for record in rows:
        part = BY_NAME[record["table"]]
        row = dict(record["row"])
        if part.key:
            keys = rank.setdefault(part.table.name, {})
            row[part.key] = keys.setdefault(row[part.key], len(keys))
        for column, target in part.refs.items():
            if row[column] is not None:
                row[column] = rank.get(target, {}).get(row[column], "deleted since")
        out.append((record["table"], row))
    return out


def _counts(url: str) -> dict[str, int]:
    db = Database(url)
    with db.read() as s:
        counts = {t.name: s.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables}
    db.dispose()
    return counts


def test_a_namespace_round_trips_exactly_between_sqlite_and_postgresql(
    source: str, pg_databases: Any, tmp_path: Path
) -> None:
    first = _export(source)
    tables = {json.loads(line)["table"] for line in first.splitlines()[1:]}
    assert {
        "trajectories",
        "steps",
        "reflections",
        "reflection_versions",
        "reflection_evidence",
        "embeddings",
        "retrievals",
        "retrieval_items",
        "retrieval_outcomes",
        "snapshots",
        "snapshot_reflections",
        "snapshot_evidence",
        "reward_capabilities",
    } <= tables
    assert b'"namespace":"neighbour"' not in first
    pg = pg_databases.create()
    upgrade(pg)
    rows = _import(pg, first)
    assert sum(rows.values()) == len(first.splitlines()) - 1
    second = _export(pg)
    assert normalized(second) == normalized(first)  # SQLite -> PostgreSQL: every row, every column
    back = f"sqlite:///{tmp_path / 'back.db'}"
    upgrade(back)
    _import(back, second)
    assert normalized(_export(back)) == normalized(first)  # and back again
    # The imported namespace serves: reads, history, retrieval from the imported vectors.
    with _app(pg, tmp_path / "b") as api:
        items = api.get("/v1/namespaces/kept/reflections", params={"status": "active"}).json()["items"]
        state = items[0]["content"].get("observation") or items[0]["text"]
        served = api.post("/v1/namespaces/kept/retrieve", json={"state": {"observation": state}, "k": 5}).json()
        assert served["items"], served
        retired = api.get("/v1/namespaces/kept/reflections", params={"status": "retired"}).json()["items"][0]
        history = api.get(f"/v1/namespaces/kept/reflections/{retired['id']}/history").json()
        assert [h["action"] for h in history][-2:] == ["edit", "retire"] and history[-1]["note"] == "gone"
        snap = api.post(
            "/v1/namespaces/kept/retrieve", json={"state": {"observation": state}, "k": 5, "snapshot": "before-delete"}
        )
        assert snap.status_code == 200 and snap.json()["items"]


def test_a_refused_import_changes_nothing(source: str, tmp_path: Path) -> None:
    data = _export(source)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    upgrade(target)
    _import(target, data)
    before = _counts(target)
    with pytest.raises(BackupError, match="already exists"):
        _import(target, data)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    upgrade(other)
    lines = data.splitlines()
    torn = b"\n".join(lines[: len(lines) // 2] + [b'{"table": "steps", "row": '])  # a file cut off mid-line
    with pytest.raises(BackupError, match="not JSON"):
        _import(other, torn)
    header = json.loads(lines[0])
    with pytest.raises(BackupError, match="schema revision"):
        _import(other, json.dumps({**header, "schema": "0001"}).encode() + b"\n" + b"\n".join(lines[1:]))
    assert _counts(target) == before
    assert _counts(other) == _counts(f"sqlite:///{_fresh(tmp_path)}")  # nothing half-written


def _fresh(tmp_path: Path) -> Path:
    path = tmp_path / "fresh.db"
    upgrade(f"sqlite:///{path}")
    return path


def test_the_commands_export_import_and_back_up(source: str, tmp_path: Path) -> None:
    env = {**os.environ, "REFLEXA_DATABASE_URL": source}
    out = tmp_path / "kept.jsonl"

    def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "reflexa.cli", *args]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)

    done = run("export", "kept", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    target = f"sqlite:///{tmp_path / 'cli.db'}"
    upgrade(target)
    done = run("import", str(out), env={**os.environ, "REFLEXA_DATABASE_URL": target})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["namespace"] == "kept"
    again = run("import", str(out), env={**os.environ, "REFLEXA_DATABASE_URL": target})
    assert again.returncode == 1 and "already exists" in again.stderr
    copy = tmp_path / "copy.db"
    done = run("db", "backup", str(copy), env=env)
    assert done.returncode == 0, done.stderr
    assert _counts(f"sqlite:///{copy}") == _counts(source)
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with pytest.raises(BackupError, match="pg_dump"):
        backup_sqlite("postgresql+psycopg://postgres@127.0.0.1/x", tmp_path / "no.db")
