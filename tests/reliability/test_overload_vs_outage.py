"""A database that is up but saturated is told apart from one that is down: both are
a 503 with Retry-After and nothing written, but the rule says which
(`database_overloaded` / `database_unavailable`) and the metric
`reflexa_database_refused{rule}` counts each. Every case raises the engine's real
error (docs/reliability.md)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from migrations import upgrade
from service.app import create_app
from store.database import overloaded
from tests.conftest import ADMIN_KEY, free_port, make_settings


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a server stuck under load)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def test_sqlite_writer_lock_held_past_the_busy_timeout_is_an_overload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    holder = create_engine(url, connect_args={"isolation_level": None})
    settings = make_settings(url, tmp_path, sqlite_busy_timeout_ms=50)
    with (
        TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api,
        holder.connect() as conn,
    ):
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # another writer holds the lock
        r = api.post("/v1/namespaces", json={"name": "busy"})
        conn.exec_driver_sql("ROLLBACK")
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "1"
        assert r.json()["error"]["rule"] == "database_overloaded"
        metrics = api.get("/metrics").text
        assert 'reflexa_database_refused_total{rule="database_overloaded"} 1.0' in metrics
        assert api.post("/v1/namespaces", json={"name": "busy"}).status_code == 201  # nothing half-written
    holder.dispose()


def test_sqlite_busy_error_itself_is_classified_as_overload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    a = create_engine(url, connect_args={"isolation_level": None, "timeout": 0.05})
    b = create_engine(url, connect_args={"isolation_level": None, "timeout": 0.05})
    with a.connect() as ca, b.connect() as cb:
        ca.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        ca.exec_driver_sql("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError) as caught:
            cb.exec_driver_sql("BEGIN IMMEDIATE")
        assert overloaded(caught.value)
        ca.exec_driver_sql("ROLLBACK")


@pytest.mark.postgres
def test_postgres_pool_checkout_timeout_is_an_overload(pg_databases: object) -> None:
    url = pg_databases.create()  # type: ignore[attr-defined]
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    with engine.connect(), pytest.raises(PoolTimeout) as caught:
        engine.connect()
    assert overloaded(caught.value)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_statement_timeout_is_an_overload(pg_databases: object) -> None:
    url = pg_databases.create()  # type: ignore[attr-defined]
    engine = create_engine(url)
    with engine.connect() as conn, pytest.raises(OperationalError) as caught:
        conn.execute(text("SET statement_timeout = 20"))
        conn.execute(text("SELECT pg_sleep(2)"))
    assert overloaded(caught.value)
    engine.dispose()


@pytest.mark.postgres
def test_a_server_that_does_not_answer_in_time_is_an_overload(silent_port: int) -> None:
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{silent_port}/x?connect_timeout=1")
    with pytest.raises(OperationalError) as caught:
        engine.connect()
    assert overloaded(caught.value), repr(caught.value.orig)
    engine.dispose()


@pytest.mark.postgres
def test_a_refused_connection_is_an_outage() -> None:
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x?connect_timeout=2")
    with pytest.raises(OperationalError) as caught:
        engine.connect()
    assert not overloaded(caught.value)
    engine.dispose()
