"""Each lexical text's feature keys beside it (`lexical_texts.keys`, written by
`store.lexical.update_lexical_text`), filled in here for the rows already stored,
so that ranking reads a candidate's keys instead of making them on every retrieve.

On SQLite the trigger that keeps the FTS5 table in step with updates now fires on
an update of `text` only: filling in the keys (or any other column) does not
rewrite the row's full-text entry.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.lexical import keys_blob, text_keys

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHUNK = 2_000

_FTS_ON_UPDATE = (
    "CREATE TRIGGER lexical_texts_au AFTER UPDATE {of} ON lexical_texts BEGIN "
    "INSERT INTO lexical_fts(lexical_fts, rowid, text) VALUES ('delete', old.reflection_pk, old.text); "
    "INSERT INTO lexical_fts(rowid, text) VALUES (new.reflection_pk, new.text); END"
)


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("lexical_texts", sa.Column("keys", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        op.execute("DROP TRIGGER IF EXISTS lexical_texts_au")
        op.execute(_FTS_ON_UPDATE.format(of="OF text"))
    rows = sa.table(
        "lexical_texts", sa.column("reflection_pk", sa.Integer), sa.column("text", sa.Text), sa.column("keys")
    )
    read = (
        sa.select(rows.c.reflection_pk, rows.c.text)
        .where(rows.c.reflection_pk > sa.bindparam("after"))
        .order_by(rows.c.reflection_pk)
        .limit(CHUNK)
    )
    write = rows.update().where(rows.c.reflection_pk == sa.bindparam("pk")).values(keys=sa.bindparam("blob"))
    after = -1
    while chunk := bind.execute(read, {"after": after}).all():
        bind.execute(write, [{"pk": pk, "blob": keys_blob(text_keys(value))} for pk, value in chunk])
        after = chunk[-1][0]


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TRIGGER IF EXISTS lexical_texts_au")
        op.execute(_FTS_ON_UPDATE.format(of=""))
    op.drop_column("lexical_texts", "keys")
