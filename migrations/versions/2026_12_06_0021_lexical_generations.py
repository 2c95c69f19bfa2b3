"""`lexical_generations`: a counter that every write to `lexical_texts` moves (in the
writing transaction, by triggers, so no writer can forget it), which a retrieve reads
before it searches the lexical index and reuses an earlier search's matches while the
counter stands still (service/retrieval/lexical_matches.py).

SQLite keeps one row, scope '': FTS5's bm25 weighs each match by the whole index's
statistics, so a write in any namespace can change another namespace's best matches.
PostgreSQL keeps one row per namespace: `ts_rank` scores each document by itself, so
only a write to the namespace's own texts changes its matches; and writers of
different namespaces never wait on each other's row. Existing texts start at 0.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 11:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_BUMP = (
    "INSERT INTO lexical_generations (scope, generation) VALUES ('', 1) "
    "ON CONFLICT (scope) DO UPDATE SET generation = generation + 1"
)
_SQLITE_EVENTS = {"ai": "INSERT", "au": "UPDATE", "ad": "DELETE"}

# PostgreSQL: one bump per namespace per statement (a bulk insert moves its namespace's
# row once), from the statement's transition tables; a table can name them for one
# event per trigger, hence three.
_PG_FUNCTIONS = {
    "INSERT": "SELECT namespace FROM new_rows",
    "DELETE": "SELECT namespace FROM old_rows",
    "UPDATE": "SELECT namespace FROM old_rows UNION SELECT namespace FROM new_rows",
}
_PG_REFERENCING = {
    "INSERT": "NEW TABLE AS new_rows",
    "DELETE": "OLD TABLE AS old_rows",
    "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
}


def upgrade() -> None:
    op.create_table(
        "lexical_generations",
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_lexical_generations")),
    )
    if op.get_bind().dialect.name != "postgresql":
        op.execute("INSERT INTO lexical_generations (scope, generation) VALUES ('', 0)")
        for suffix, event in _SQLITE_EVENTS.items():
            op.execute(
                f"CREATE TRIGGER lexical_texts_generation_{suffix} AFTER {event} ON lexical_texts "
                f"BEGIN {_SQLITE_BUMP}; END"
            )
        return
    op.execute("INSERT INTO lexical_generations (scope, generation) SELECT DISTINCT namespace, 0 FROM lexical_texts")
    for event, changed in _PG_FUNCTIONS.items():
        name = event.lower()
        op.execute(
            f"CREATE FUNCTION lexical_generation_{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO lexical_generations (scope, generation) SELECT DISTINCT namespace, 1 FROM ({changed}) c "
            "ON CONFLICT (scope) DO UPDATE SET generation = lexical_generations.generation + 1; "
            "RETURN NULL; END $$"
        )
        op.execute(
            f"CREATE TRIGGER lexical_texts_generation_{name} AFTER {event} ON lexical_texts "
            f"REFERENCING {_PG_REFERENCING[event]} FOR EACH STATEMENT EXECUTE FUNCTION lexical_generation_{name}()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for suffix in _SQLITE_EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS lexical_texts_generation_{suffix}")
    else:
        for event in _PG_FUNCTIONS:
            op.execute(f"DROP TRIGGER IF EXISTS lexical_texts_generation_{event.lower()} ON lexical_texts")
            op.execute(f"DROP FUNCTION IF EXISTS lexical_generation_{event.lower()}()")
    op.drop_table("lexical_generations")
