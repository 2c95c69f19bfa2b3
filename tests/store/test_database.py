"""Engines and units of work (store/database.py): SQLite connections run in WAL
mode with foreign keys enforced; the reads of one thread inside `one_read()` share
one transaction."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy.orm import Session

from migrations import upgrade
from store.database import Database, create_db_engine


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    engine = create_db_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_reads_inside_one_read_share_its_transaction(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    db = Database(url)
    elsewhere: list[Session] = []

    def read_in_another_thread() -> None:
        with db.read() as s:
            elsewhere.append(s)

    with db.one_read():
        with db.read() as first, db.read() as second:
            assert first is second
        with db.one_read(), db.read() as nested:  # a nested block joins the open one
            assert nested is first
        thread = threading.Thread(target=read_in_another_thread)
        thread.start()
        thread.join()
        assert elsewhere[0] is not first  # the scope is this thread's
    with db.read() as after:
        assert after is not first
    db.dispose()
