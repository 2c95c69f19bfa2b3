"""Engines and units of work (store/database.py): SQLite connections run in WAL
mode with foreign keys enforced."""

from __future__ import annotations

from pathlib import Path

from migrations import upgrade
from store.database import create_db_engine


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    engine = create_db_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()
