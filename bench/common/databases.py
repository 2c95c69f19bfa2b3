"""Throwaway databases for a benchmark run: SQLite files in a temporary directory and
`reflexa_bench_*` databases on the PostgreSQL server at REFLEXA_BENCH_PG_URL, every
one removed when the run ends (also when it is interrupted)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

PG_ADMIN_URL = os.environ.get("REFLEXA_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


class Databases:
    """Hands out empty databases of one engine and removes them all at close().

    SQLite files live in one temporary directory; PostgreSQL databases are created
    as `reflexa_bench_<random>` on the server at PG_ADMIN_URL and dropped WITH (FORCE)
    so a connection a killed server left behind cannot keep one alive.
    """

    def __init__(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="reflexa_bench_"))
        self._pg_names: list[str] = []
        self._pg_admin: Engine | None = None

    def sqlite(self, name: str) -> str:
        return f"sqlite:///{self._tmp / (name + '.db')}"

    def postgres(self, template: str | None = None) -> str:
        if self._pg_admin is None:
            self._pg_admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        name = f"reflexa_bench_{uuid.uuid4().hex[:10]}"
        with self._pg_admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
        self._pg_names.append(name)
        return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    def url(self, backend: str, name: str) -> str:
        return self.sqlite(name) if backend == "sqlite" else self.postgres()

    def copy(self, url: str, name: str) -> str:
        """A new database with the contents of `url`, which nothing may be connected to
        (PostgreSQL copies it as a template; SQLite copies the file and its WAL)."""
        if url.startswith("sqlite"):
            source, target = Path(make_url(url).database or ""), self._tmp / (name + ".db")
            for suffix in ("", "-wal"):
                if Path(f"{source}{suffix}").exists():
                    shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
            return f"sqlite:///{target}"
        return self.postgres(template=make_url(url).database)

    def close(self) -> None:
        try:
            if self._pg_admin is not None:
                with self._pg_admin.connect() as conn:
                    for name in self._pg_names:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                self._pg_admin.dispose()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


@contextlib.contextmanager
def databases() -> Iterator[Databases]:
    dbs = Databases()
    try:
        yield dbs
    finally:
        dbs.close()
