"""Embeddings remember which text they encode (`text_hash`): retrieval can tell an
exact match of the query state from a look-alike, and a worker can reuse a vector
it already has for the same text instead of encoding it again.

Rows written before this revision have no hash; `reflexa reindex` fills them in
(until then they rank by similarity and the band rule, without the exact tier).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("embeddings", sa.Column("text_hash", sa.String(length=32), nullable=True))
    # text_hash first: an index led by `model` made SQLite's planner scan every
    # embedding of the model for the candidate query (bench/retrieval: 69 ms at 100k).
    op.create_index("ix_embeddings_text_hash_model", "embeddings", ["text_hash", "model"])


def downgrade() -> None:
    op.drop_index("ix_embeddings_text_hash_model", table_name="embeddings")
    op.drop_column("embeddings", "text_hash")
