"""SQLite: an index of `lexical_texts` on (reflection_pk, namespace, kind), which the
lexical search's join (`store.lexical.list_lexical_matches`) reads instead of each
match's row. Every FTS5 match is checked for its namespace and kind; through the
table, each check read a row of ~1 KB (its text and feature keys); through this
index, ~30 bytes. On the agent-states bench the query took 1.7-1.9 ms in a retrieve
against 2.7 (docs/benchmarks.md). PostgreSQL's search reads `lexical_texts` itself
and needs nothing new.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 08:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_lexical_texts_match"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.create_index(INDEX, "lexical_texts", ["reflection_pk", "namespace", "kind"])


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.drop_index(INDEX, table_name="lexical_texts")
