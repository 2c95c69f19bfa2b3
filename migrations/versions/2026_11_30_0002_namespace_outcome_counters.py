"""Namespace outcome counters: the utility baseline as two running totals on the
namespace row instead of an aggregate over every outcome on each retrieve.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 08:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD/DROP COLUMN, never batch mode: a batch "move and copy" of namespaces
    # on SQLite (foreign keys on) would cascade-delete every row that references it.
    op.add_column(
        "namespaces", sa.Column("outcome_successes", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
    )
    op.add_column(
        "namespaces", sa.Column("outcome_total", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
    )
    # Backfill from the outcomes already recorded (the same rule as the counters:
    # only outcomes with a success value count).
    op.execute(
        """
        UPDATE namespaces SET
          outcome_total = (
            SELECT count(*) FROM retrieval_outcomes o JOIN retrievals r ON r.id = o.retrieval_id
            WHERE r.namespace = namespaces.name AND o.success IS NOT NULL),
          outcome_successes = (
            SELECT count(*) FROM retrieval_outcomes o JOIN retrievals r ON r.id = o.retrieval_id
            WHERE r.namespace = namespaces.name AND o.success = true)
        """
    )


def downgrade() -> None:
    op.drop_column("namespaces", "outcome_total")
    op.drop_column("namespaces", "outcome_successes")
