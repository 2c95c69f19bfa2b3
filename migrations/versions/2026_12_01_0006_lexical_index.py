"""A lexical index of state text in SQL, beside the vector index: `lexical_texts`
holds each reflection's state text; SQLite searches it with an FTS5 table kept in
step by triggers, PostgreSQL with a generated `tsvector` column under a GIN index.
Both tokenise without stop words or stemming ('simple' / unicode61), so numbers
and short words ("2 steps left") count.

The FTS5 table and the tsvector column are engine structures outside the ORM
(migrations.include_name leaves them out of comparisons).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 09:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_FTS = [
    "CREATE VIRTUAL TABLE lexical_fts USING fts5(text, content='lexical_texts', content_rowid='reflection_pk', "
    "tokenize='unicode61')",
    "CREATE TRIGGER lexical_texts_ai AFTER INSERT ON lexical_texts BEGIN "
    "INSERT INTO lexical_fts(rowid, text) VALUES (new.reflection_pk, new.text); END",
    "CREATE TRIGGER lexical_texts_ad AFTER DELETE ON lexical_texts BEGIN "
    "INSERT INTO lexical_fts(lexical_fts, rowid, text) VALUES ('delete', old.reflection_pk, old.text); END",
    "CREATE TRIGGER lexical_texts_au AFTER UPDATE ON lexical_texts BEGIN "
    "INSERT INTO lexical_fts(lexical_fts, rowid, text) VALUES ('delete', old.reflection_pk, old.text); "
    "INSERT INTO lexical_fts(rowid, text) VALUES (new.reflection_pk, new.text); END",
]


def upgrade() -> None:
    op.create_table(
        "lexical_texts",
        sa.Column("reflection_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["reflection_pk"],
            ["reflections.pk"],
            name=op.f("fk_lexical_texts_reflection_pk_reflections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("reflection_pk", name=op.f("pk_lexical_texts")),
    )
    op.create_index("ix_lexical_texts_ns_kind", "lexical_texts", ["namespace", "kind"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE lexical_texts ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED"
        )
        op.execute("CREATE INDEX ix_lexical_texts_tsv ON lexical_texts USING GIN (tsv)")
    else:
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for name in ("lexical_texts_au", "lexical_texts_ad", "lexical_texts_ai"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS lexical_fts")
    op.drop_index("ix_lexical_texts_ns_kind", table_name="lexical_texts")
    op.drop_table("lexical_texts")
