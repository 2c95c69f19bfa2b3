"""Exact matches under every internal state a merged exemplar was seen with: each
evidence row keeps the hash of its step's internal-state text (`internal_hash`),
and each reflection (and its snapshot copy) the distinct hashes of its evidence
(`internal_hashes`), kept in step with the evidence like `evidence_count`.

Rows written before this revision have none; `reflexa reindex` fills them in from
the steps (until then a merged exemplar is exact only under its first occurrence's
internal state, as before).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("reflection_evidence", sa.Column("internal_hash", sa.String(length=32), nullable=True))
    op.add_column("reflections", sa.Column("internal_hashes", _json(), nullable=True))
    op.add_column("snapshot_reflections", sa.Column("internal_hashes", _json(), nullable=True))


def downgrade() -> None:
    op.drop_column("snapshot_reflections", "internal_hashes")
    op.drop_column("reflections", "internal_hashes")
    op.drop_column("reflection_evidence", "internal_hash")
