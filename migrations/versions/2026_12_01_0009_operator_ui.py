"""Operator UI: signed-in browser sessions (a hash of the cookie secret, the key it
was opened with, a CSRF token, expiry and sign-out); the `uses` count at an
operator's last "keep" decision on a reflection (the review queue shows an
underperformer again only once new outcomes arrive); each retrieval's server time;
an index for the retrievals made during one episode; a key's expiry (a rotated key's
grace period).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 15:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_ui_sessions_key_id_api_keys"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_ui_sessions")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_ui_sessions_secret_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_ui_sessions_key", "ui_sessions", ["key_id"], unique=False)
    # Plain ADD COLUMN (no batch mode): batch mode on SQLite rebuilds the table.
    op.add_column("reflections", sa.Column("reviewed_uses", sa.Integer(), nullable=True))
    op.add_column("retrievals", sa.Column("latency_ms", sa.Float(), nullable=True))
    op.create_index(
        "ix_retrievals_ns_trajectory", "retrievals", ["namespace", "trajectory_id", "created_at"], unique=False
    )
    # The overview's per-day counts read these indexes alone (no row lookups).
    op.drop_index("ix_retrievals_ns_created", table_name="retrievals")
    op.create_index("ix_retrievals_ns_created", "retrievals", ["namespace", "created_at", "latency_ms"], unique=False)
    op.create_index("ix_trajectories_ns_created", "trajectories", ["namespace", "created_at", "success"], unique=False)
    # The reflections list, newest first, unfiltered: without it SQLite sorts the namespace.
    op.create_index("ix_reflections_ns_pk", "reflections", ["namespace", "pk"], unique=False)
    # A rotated key stays valid until then (its grace period).
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "expires_at")
    op.drop_index("ix_reflections_ns_pk", table_name="reflections")
    op.drop_index("ix_trajectories_ns_created", table_name="trajectories")
    op.drop_index("ix_retrievals_ns_created", table_name="retrievals")
    op.create_index("ix_retrievals_ns_created", "retrievals", ["namespace", "created_at"], unique=False)
    op.drop_index("ix_retrievals_ns_trajectory", table_name="retrievals")
    op.drop_column("retrievals", "latency_ms")
    op.drop_column("reflections", "reviewed_uses")
    op.drop_index("ix_ui_sessions_key", table_name="ui_sessions")
    op.drop_table("ui_sessions")
