"""Engines and units of work (store/database.py): SQLite connections run in WAL
mode with foreign keys enforced; the reads of one thread inside `one_read()` share
one transaction; PostgreSQL pings a pooled connection only after it sat idle, and
replaces one that died meanwhile; a read without a transaction on PostgreSQL."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from migrations import upgrade
from store.database import Database, create_db_engine
from tests.conftest import PG_ADMIN_URL


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


def _terminate_other_backends(admin_url: str, database: str) -> int:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(
            text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :d"),
            {"d": database},
        ).scalar_one()
    admin.dispose()
    return int(killed)


@pytest.mark.postgres
def test_postgres_pings_only_connections_idle_past_the_threshold(pg_databases: Any) -> None:
    url = pg_databases.create()
    db = Database(url, pool_size=1, ping_after_idle_s=0.3)
    pings: list[int] = []
    ping = db.engine.dialect.do_ping
    db.engine.dialect.do_ping = lambda conn: pings.append(1) or ping(conn)  # type: ignore[method-assign]
    try:
        for _ in range(3):  # back in use at once: no round trip spent on a ping
            with db.read() as s:
                assert s.execute(text("SELECT 1")).scalar_one() == 1
        assert pings == []
        time.sleep(0.4)
        with db.read() as s:
            s.execute(text("SELECT 1"))
        assert pings == [1]
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_replaces_an_idle_connection_that_died(pg_databases: Any) -> None:
    url = pg_databases.create()
    db = Database(url, pool_size=1, ping_after_idle_s=0.2)
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE t (x int)"))
        # the pooled connection dies while idle (as in a database restart)
        assert _terminate_other_backends(PG_ADMIN_URL, make_url(url).database or "") == 1
        time.sleep(0.3)
        with db.write() as s:  # its ping fails; the pool opens another: no error reaches the request
            s.execute(text("INSERT INTO t VALUES (1)"))
        with db.read() as s:
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_autocommit_reads_open_no_transaction_and_leave_none_behind(pg_databases: Any) -> None:
    """`read(autocommit=True)` sends no BEGIN: each statement reads what is committed
    when it runs, as under READ COMMITTED, and the server shows no open transaction
    between them. The pooled connection goes back transactional: a write unit on it
    after such a read still rolls back as a whole."""
    url = pg_databases.create()
    db = Database(url, pool_size=1)
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE t (x int)"))
        with db.one_read(autocommit=True), db.read() as s, db.read(autocommit=True) as joined:
            assert joined is s  # inside one_read, every read shares its connection
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
            driver = s.connection().connection.dbapi_connection
            assert driver is not None and driver.info.transaction_status.name == "IDLE"
            with db.write() as w:  # another connection commits between two statements
                w.execute(text("INSERT INTO t VALUES (1)"))
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
        with pytest.raises(RuntimeError), db.write() as s:  # the same pooled connection
            s.execute(text("INSERT INTO t VALUES (2)"))
            raise RuntimeError("rolled back")
        with db.read() as s:
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
            driver = s.connection().connection.dbapi_connection
            assert driver is not None and driver.info.transaction_status.name == "INTRANS"
    finally:
        db.dispose()


def test_sqlite_autocommit_reads_keep_their_snapshot(tmp_path: Path) -> None:
    """On SQLite `autocommit` changes nothing: the block is one read transaction, so a
    commit made meanwhile stays unseen until it ends (no round trip to save there)."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    db = Database(url)
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE t (x int)"))
        with db.one_read(autocommit=True), db.read() as s:
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
            with db.write() as w:
                w.execute(text("INSERT INTO t VALUES (1)"))
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
        with db.read(autocommit=True) as s:
            assert s.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_one_statement_write_commits_as_its_statement_ends(pg_databases: Any) -> None:
    """No transaction around it: the row is visible elsewhere before the block ends,
    and a failing statement leaves nothing (a statement is atomic by itself)."""
    url = pg_databases.create()
    db = Database(url, pool_size=1)
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE t (x int PRIMARY KEY)"))
        with db.one_statement_write() as s:
            s.execute(text("INSERT INTO t VALUES (1)"))
            with db.read() as elsewhere:
                assert elsewhere.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
        with pytest.raises(IntegrityError), db.one_statement_write() as s:
            s.execute(text("INSERT INTO t VALUES (2), (1)"))
        with db.read() as s:
            assert s.execute(text("SELECT array_agg(x) FROM t")).scalar_one() == [1]
    finally:
        db.dispose()
