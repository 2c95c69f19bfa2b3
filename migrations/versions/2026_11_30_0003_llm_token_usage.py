"""LLM token usage per namespace and UTC day: the shared budget count that every
worker process checks (a per-process count multiplied the cap by the workers).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "llm_token_usage",
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace"], ["namespaces.name"], name=op.f("fk_llm_token_usage_namespace_namespaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("namespace", "day", name=op.f("pk_llm_token_usage")),
    )


def downgrade() -> None:
    op.drop_table("llm_token_usage")
