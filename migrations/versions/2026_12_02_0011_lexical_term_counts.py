"""SQLite: an fts5vocab table over the lexical index, so a retrieve can read how many
documents hold each of its words (`store.lexical.list_term_counts`) and search by
the rare ones only; an OR query over common words makes FTS5 score nearly every
document (17 ms at 10k states, 208 ms at 100k). PostgreSQL reads the same from
ANALYZE's element statistics of the tsvector column and needs nothing here.

Like the FTS5 table it reads, an engine structure outside the ORM (its name starts
with `lexical_fts`: migrations.include_name leaves it out of comparisons).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("CREATE VIRTUAL TABLE lexical_fts_vocab USING fts5vocab(lexical_fts, 'row')")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TABLE IF EXISTS lexical_fts_vocab")
