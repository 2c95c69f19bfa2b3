"""Engines and units of work.

One `Database` per process. A unit of work is one transaction: opened at the edge
(a request, a job step), committed once at the end, rolled back on any error.
Repositories only `flush()`.

SQLite: WAL so readers never block the writer, a busy timeout so writers queue
instead of failing, and `BEGIN IMMEDIATE` for write units so two writers never
both read and then deadlock on the lock upgrade (SQLITE_BUSY that busy_timeout
cannot retry). Read units use a plain deferred BEGIN.

PostgreSQL: a pooled connection is pinged at checkout only when it has sat idle
for PING_AFTER_IDLE_S (a restart or a dropped link is found before the request
uses it); one back in use within that time is not (under load that is nearly
every checkout, and the ping was a round trip per unit of work). A connection
that died in between fails its request (a 503, retried by the client) and makes
the pool replace every connection opened before. A read that asks for no
transaction (`read(autocommit=True)`) runs each statement on its own: PostgreSQL's
READ COMMITTED gives every statement of a transaction its own snapshot anyway, so
the BEGIN and the ROLLBACK would be two round trips that buy nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import ARRAY, BigInteger, Engine, Integer, String, any_, bindparam, create_engine, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

_SQLITE_BEGIN_OPTION = "reflexa_sqlite_begin"
PING_AFTER_IDLE_S = 1.0
T = TypeVar("T")


def _sqlite_engine(url: str, busy_timeout_ms: int) -> Engine:
    parsed = make_url(url)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        # The driver's own transaction handling is switched off so that we decide
        # how each transaction begins (see module docstring).
        connect_args={"check_same_thread": False, "isolation_level": None},
        pool_size=8,
        max_overflow=16,
        pool_pre_ping=False,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across app crashes in WAL mode
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def dialect_insert(session: Session) -> Callable[..., Any]:
    """The dialect's INSERT (with ON CONFLICT) for the session's database."""
    return insert_for(session.get_bind().dialect.name)


def insert_for(dialect: str) -> Callable[..., Any]:
    """The INSERT (with ON CONFLICT) of the dialect named so."""
    return pg_insert if dialect == "postgresql" else sqlite_insert


def one_of(column: Any, name: str, postgres: bool) -> Any:
    """`column IN (the list bound as :name)`. PostgreSQL: `column = ANY(:name)`, the
    list bound as one array, so the statement's text is the same whatever the list's
    length, and psycopg prepares it after five runs. Expanded into one parameter per
    value (the way SQLite takes a list), each length was another statement, planned on
    every run (0.9-1.1 ms for a retrieve's candidate read)."""
    if postgres:
        # an array of the unbounded type: a cast to VARCHAR(16)[] would cut a longer value
        # short, and a cut value could equal a stored one
        if isinstance(column.type, String):
            element: Any = String()
        elif isinstance(column.type, Integer):
            element = BigInteger()
        else:
            raise TypeError(f"one_of binds strings or integers, not {column.type!r}")
        return column == any_(bindparam(name, type_=ARRAY(element)))
    return column.in_(bindparam(name, expanding=True))


def _postgres_engine(url: str, pool_size: int, ping_after_idle_s: float) -> Engine:
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=False)

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")  # none yet: a connection just opened
        if since is None or time.monotonic() - since < ping_after_idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            # the pool discards this connection and checks out another (a fresh one if need be)
            raise DisconnectionError(f"idle connection failed its ping: {exc}") from exc

    return engine


def create_db_engine(
    url: str, *, pool_size: int = 10, busy_timeout_ms: int = 30_000, ping_after_idle_s: float = PING_AFTER_IDLE_S
) -> Engine:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url, busy_timeout_ms)
    if backend == "postgresql":
        return _postgres_engine(url, pool_size, ping_after_idle_s)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///… or postgresql+psycopg://…")


class Database:
    """The process's engine plus read and write units of work."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        busy_timeout_ms: int = 30_000,
        ping_after_idle_s: float = PING_AFTER_IDLE_S,
    ) -> None:
        self.url = url
        self.engine = create_db_engine(
            url, pool_size=pool_size, busy_timeout_ms=busy_timeout_ms, ping_after_idle_s=ping_after_idle_s
        )
        self.dialect = self.engine.dialect.name
        write_bind = self.engine
        if self.dialect == "sqlite":
            write_bind = self.engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        # Re-entrant so a nested write in one thread fails as before (busy timeout), not hangs.
        self._write_gate: AbstractContextManager[object] = (
            threading.RLock() if self.dialect == "sqlite" else nullcontext()
        )
        self._read = sessionmaker(self.engine, expire_on_commit=False, autoflush=False)
        # SQLite's read transaction costs no round trip and holds the block to one snapshot: kept.
        self._autocommit = self._read
        if self.dialect == "postgresql":
            autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            self._autocommit = sessionmaker(autocommit, expire_on_commit=False, autoflush=False)
        self._write = sessionmaker(write_bind, expire_on_commit=False, autoflush=False)
        self._shared_read = threading.local()  # this thread's `one_read()` session, if any

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: commit at the end, roll back on error.

        SQLite: writers of this process queue on a lock, in arrival order, before
        `BEGIN IMMEDIATE`; left to SQLite's busy handler they sleep and retry, and
        under 16 concurrent writers p99 was 86x p50 (bench/ingest profile: 94 % of
        request time inside BEGIN). Other processes are still covered by busy_timeout."""
        with self._write_gate, self._write() as session, session.begin():
            yield session

    @contextmanager
    def one_statement_write(self) -> Iterator[Session]:
        """A write unit of exactly one statement. On PostgreSQL it runs with no
        transaction around it (a statement is atomic by itself, and commits as it
        ends), without the BEGIN and COMMIT round trips; SQLite: `write()`."""
        if not self.is_postgres:
            with self.write() as session:
                yield session
            return
        with self._autocommit() as session:
            yield session

    def run_write(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one write unit; if it loses a race on a unique key (two
        clients creating the same id at once), run it once more: the second run
        sees the winner's row and takes the replay/conflict path."""
        try:
            with self.write() as session:
                return work(session)
        except IntegrityError:
            with self.write() as session:
                return work(session)

    @contextmanager
    def read(self, *, autocommit: bool = False) -> Iterator[Session]:
        """One read transaction (rolled back at the end; nothing to commit). Inside
        `one_read()`, the thread's open one.

        `autocommit`: on PostgreSQL no transaction at all, each statement reading what
        is committed when it runs (what READ COMMITTED gives each statement of a
        transaction too), without a BEGIN and a ROLLBACK round trip. Only for plain
        SELECTs: no server-side cursor (`yield_per`), no `FOR UPDATE`, no `SET LOCAL`.
        SQLite: the same read transaction as without it."""
        shared = getattr(self._shared_read, "session", None)
        if shared is not None:
            yield shared
            return
        with (self._autocommit if autocommit else self._read)() as session:  # close() rolls back
            yield session

    @contextmanager
    def one_read(self, *, autocommit: bool = False) -> Iterator[None]:
        """Every `read()` of this thread inside the block shares one read transaction:
        one connection checkout and one BEGIN for a request that reads in several
        short steps (a retrieve: lexical matches, candidates, evidence). The
        transaction is open for the whole block, so never put an embedding call, a
        wait or a write inside it. `autocommit` as for `read()`: one checkout, no
        transaction on PostgreSQL."""
        if getattr(self._shared_read, "session", None) is not None:
            yield
            return
        with (self._autocommit if autocommit else self._read)() as session:
            self._shared_read.session = session
            try:
                yield
            finally:
                self._shared_read.session = None

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def dispose(self) -> None:
        self.engine.dispose()


# SQLSTATEs of a database that is up but cannot take the work now (PostgreSQL
# appendix A): class 53 (insufficient resources: too many connections, out of
# memory or disk), query_canceled (a statement timeout), lock_not_available.
_OVERLOAD_STATES = ("53", "57014", "55P03")
# SQLite: the writer lock was held past busy_timeout.
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")


def overloaded(exc: BaseException) -> bool:
    """Whether a database error means "up but saturated" (a pool checkout or connect
    timed out, a lock or statement timeout, too many connections) rather than "down"
    (refused, closed, shutting down). Both are answered 503 with Retry-After; telling
    them apart keeps an operator from chasing an outage that is a load spike."""
    if isinstance(exc, PoolTimeout):  # every pooled connection stayed busy past pool_timeout
        return True
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    if state and state.startswith(_OVERLOAD_STATES):
        return True
    if type(orig).__name__ == "ConnectionTimeout":  # psycopg: the server did not answer in time
        return True
    message = str(orig).lower()
    return any(m in message for m in _SQLITE_BUSY) or "connection timeout expired" in message
