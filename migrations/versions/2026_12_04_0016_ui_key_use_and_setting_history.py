"""Operator UI (issue 24, branch ui-learning): when each API key was last used
(`api_keys.last_used_at`, refreshed at most once a minute), and the history of
namespace settings changes (`namespace_setting_changes`: who changed which setting
when, old -> new).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("api_keys", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "namespace_setting_changes",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("path", sa.String(length=300), nullable=False),
        sa.Column("old_value", _json(), nullable=True),
        sa.Column("new_value", _json(), nullable=True),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace"],
            ["namespaces.name"],
            name=op.f("fk_namespace_setting_changes_namespace_namespaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_namespace_setting_changes")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_namespace_setting_changes_ns", "namespace_setting_changes", ["namespace", "pk"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_namespace_setting_changes_ns", table_name="namespace_setting_changes")
    op.drop_table("namespace_setting_changes")
    op.drop_column("api_keys", "last_used_at")
