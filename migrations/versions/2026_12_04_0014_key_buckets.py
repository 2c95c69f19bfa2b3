"""Per-key request-rate buckets shared by every API process (`limits.key_limits_scope`):
N replicas admit a key's configured rate in total, not N times it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "key_buckets",
        sa.Column("identity", sa.String(length=64), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("identity", name=op.f("pk_key_buckets")),
    )
    op.create_index(op.f("ix_key_buckets_updated"), "key_buckets", ["updated"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_key_buckets_updated"), table_name="key_buckets")
    op.drop_table("key_buckets")
