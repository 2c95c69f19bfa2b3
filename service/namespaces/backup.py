"""Backups: a namespace exported to a JSON-lines file and imported into any
database (SQLite or PostgreSQL, the same schema revision), and an online copy of a
whole SQLite database. Used by `reflexa export`, `reflexa import`, `reflexa db backup`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson
from sqlalchemy.engine import make_url

from migrations import schema_status
from service.namespaces import repository as repo
from service.namespaces.repository import BackupError
from store.database import Database
from store.models import utcnow
from store.snapshots import begin_consistent


def _schema(db: Database) -> str:
    status = schema_status(db.engine)
    if not status.up_to_date:
        raise BackupError(status.upgrade_hint())
    return ",".join(status.current)


def export_namespace(db: Database, namespace: str, out: IO[bytes]) -> int:
    """Write the namespace to `out`, one JSON object a line, from one consistent
    read (writers may go on meanwhile); returns the rows written."""
    schema = _schema(db)
    n = 0
    with db.read() as session:
        begin_consistent(session)
        if session.get(repo.Namespace, namespace) is None:
            raise BackupError(f"namespace {namespace!r} not found")
        for record in repo.dump_namespace(session, namespace, schema=schema, exported_at=utcnow()):
            out.write(orjson.dumps(record) + b"\n")
            n += 1
    return n - 1  # the header is not a row


def _records(source: IO[bytes]) -> Iterator[dict]:
    for number, line in enumerate(source, 1):
        if line.strip():
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                raise BackupError(f"line {number} is not JSON") from None


def import_namespace(db: Database, source: IO[bytes]) -> repo.Loaded:
    """Load an export in one transaction: all of it, or (on any error) nothing."""
    schema = _schema(db)
    with db.write() as session:
        return repo.load_namespace(session, _records(source), schema=schema)


def backup_sqlite(database_url: str, target: Path) -> None:
    """A consistent copy of a live SQLite database (SQLite's online backup: readers
    and writers go on meanwhile), written to `target` (which must not exist)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        raise BackupError(
            "`reflexa db backup` copies SQLite databases; for PostgreSQL use pg_dump (docs/operations.md)"
        )
    if target.exists():
        raise BackupError(f"{target} exists; choose a new file")
    target.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(url.database)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy, pages=1024)  # in steps: a writer waits at most one step
        finally:
            copy.close()
    finally:
        source.close()
