"""A namespace's calibrated lexical weight (`namespaces.lexical_weight_calibrated`)
and the report of the calibration that chose it (`namespaces.lexical_calibration`):
written by the `calibrate.lexical` job (reflectors/lexical_calibration.py).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("namespaces", sa.Column("lexical_weight_calibrated", sa.Float(), nullable=True))
    op.add_column(
        "namespaces",
        sa.Column(
            "lexical_calibration",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
    )


def downgrade() -> None:
    op.drop_column("namespaces", "lexical_calibration")
    op.drop_column("namespaces", "lexical_weight_calibrated")
