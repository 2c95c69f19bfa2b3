"""Alembic migrations: the only way the schema is made or changed.

`upgrade(url)` is what `reflexa db upgrade` runs; `schema_status(engine)` is what the
server checks at start-up so it can refuse an out-of-date schema with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from store.database import create_db_engine

HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    # ConfigParser interpolation would mangle '%' in URL-encoded passwords.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(url: str, fn: Callable[[Config, str], None], revision: str) -> None:
    # Our own engine: it creates the SQLite data directory and sets the pragmas.
    engine = create_db_engine(url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            fn(cfg, revision)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    _run(url, command.upgrade, revision)


def downgrade(url: str, revision: str) -> None:
    _run(url, command.downgrade, revision)


def heads() -> tuple[str, ...]:
    return tuple(ScriptDirectory(str(HERE)).get_heads())


@dataclass(frozen=True)
class SchemaStatus:
    current: tuple[str, ...]
    head: tuple[str, ...]

    @property
    def up_to_date(self) -> bool:
        return set(self.current) == set(self.head)

    def upgrade_hint(self) -> str:
        """What to tell someone whose database is behind this code: where it is, what
        this code needs, and the command that fixes it."""
        current = ", ".join(self.current) or "empty"
        return (
            f"database schema is at revision {current} but this version of Reflexa needs "
            f"{', '.join(self.head)}; run `reflexa db upgrade` (same REFLEXA_DATABASE_URL) and start again"
        )


def schema_status(engine: Engine) -> SchemaStatus:
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_heads()
    return SchemaStatus(current=tuple(current), head=heads())


# Engine structures of the lexical index that the ORM does not describe: SQLite's FTS5
# table and its shadow tables (migration 0006) and the index its join reads (0020),
# PostgreSQL's tsvector column and its GIN index (0006).
ENGINE_ONLY_TABLES = ("lexical_fts",)
ENGINE_ONLY_COLUMNS = {("lexical_texts", "tsv")}
ENGINE_ONLY_INDEXES = {"ix_lexical_texts_tsv", "ix_lexical_texts_match"}


def include_name(name: str | None, type_: str, parent_names: dict[str, str | None]) -> bool:
    """For schema comparisons (autogenerate, the migrations test): everything but
    the engine-only structures above."""
    if type_ == "table" and name is not None and name.startswith(ENGINE_ONLY_TABLES):
        return False
    if type_ == "column" and (parent_names.get("table_name"), name) in ENGINE_ONLY_COLUMNS:
        return False
    return not (type_ == "index" and name in ENGINE_ONLY_INDEXES)
