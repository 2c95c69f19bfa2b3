"""Reward capabilities: revocable secrets in a URL path (`POST /v1/reward/<secret>`)
that score one rubric of one namespace without an API key (OpenRLHF's remote reward
model sends no Authorization header). Only a SHA-256 of each secret is stored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reward_capabilities",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("rubric_id", sa.String(length=128), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["namespace"],
            ["namespaces.name"],
            name=op.f("fk_reward_capabilities_namespace_namespaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_reward_capabilities")),
        sa.UniqueConstraint("id", name=op.f("uq_reward_capabilities_id")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_reward_capabilities_secret_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_reward_capabilities_ns_rubric", "reward_capabilities", ["namespace", "rubric_id", "pk"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_reward_capabilities_ns_rubric", table_name="reward_capabilities")
    op.drop_table("reward_capabilities")
