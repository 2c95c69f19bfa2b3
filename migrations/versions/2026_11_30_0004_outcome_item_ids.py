"""Retrieval outcomes may name the served items the agent acted on: only those are
credited (crediting every served item gave look-alikes utility they did not earn).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 10:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column(
        "retrieval_outcomes",
        sa.Column("item_ids", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("retrieval_outcomes", "item_ids")
