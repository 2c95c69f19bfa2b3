"""Trainer snapshots and evaluation freezes; retries that name their earlier attempt.

- `snapshots` and its copies (`snapshot_reflections`, `snapshot_embeddings`,
  `snapshot_evidence`, `snapshot_trajectories`): memory pinned for trainers, so a
  read under a snapshot answers the same while the namespace changes.
- `namespaces.frozen` / `frozen_at`: a namespace frozen for evaluation.
- `trajectories.parent_trajectory_id` / `attempt`: the attempt a trajectory retries.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column(
            "settings", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("outcome_successes", sa.BigInteger(), nullable=False),
        sa.Column("outcome_total", sa.BigInteger(), nullable=False),
        sa.Column("reflection_count", sa.Integer(), nullable=False),
        sa.Column("trajectory_count", sa.Integer(), nullable=False),
        sa.Column("step_count", sa.BigInteger(), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace"], ["namespaces.name"], name=op.f("fk_snapshots_namespace_namespaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_snapshots")),
        sa.UniqueConstraint("namespace", "id", name=op.f("uq_snapshots_namespace_id")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "snapshot_embeddings",
        sa.Column("snapshot_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("reflection_pk", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("field", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("text_hash", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["snapshot_pk"],
            ["snapshots.pk"],
            name=op.f("fk_snapshot_embeddings_snapshot_pk_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_pk", "reflection_pk", "field", "model", name=op.f("pk_snapshot_embeddings")),
    )
    op.create_index(
        "ix_snapshot_embeddings_kind", "snapshot_embeddings", ["snapshot_pk", "kind", "field", "model"], unique=False
    )
    op.create_table(
        "snapshot_evidence",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("snapshot_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("reflection_pk", sa.BigInteger(), nullable=False),
        sa.Column("trajectory_pk", sa.BigInteger(), nullable=False),
        sa.Column("trajectory_id", sa.String(length=128), nullable=False),
        sa.Column("task_hash", sa.String(length=16), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=True),
        sa.Column("policy_version", sa.String(length=200), nullable=True),
        sa.Column("group_id", sa.String(length=128), nullable=True),
        sa.Column("step_start", sa.Integer(), nullable=True),
        sa.Column("step_end", sa.Integer(), nullable=True),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["snapshot_pk"],
            ["snapshots.pk"],
            name=op.f("fk_snapshot_evidence_snapshot_pk_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_snapshot_evidence")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_snapshot_evidence_reflection", "snapshot_evidence", ["snapshot_pk", "reflection_pk"], unique=False
    )
    op.create_table(
        "snapshot_reflections",
        sa.Column("snapshot_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("reflection_pk", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "content", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("environment", sa.String(length=200), nullable=True),
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("reflector", sa.String(length=100), nullable=False),
        sa.Column("reflector_version", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("evidence_count", sa.Integer(), nullable=False),
        sa.Column("evidence_successes", sa.Integer(), nullable=False),
        sa.Column("evidence_failures", sa.Integer(), nullable=False),
        sa.Column("evidence_value", sa.Float(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("reward_sum", sa.Float(), nullable=False),
        sa.Column("lexical_text", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_pk"],
            ["snapshots.pk"],
            name=op.f("fk_snapshot_reflections_snapshot_pk_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_pk", "reflection_pk", name=op.f("pk_snapshot_reflections")),
    )
    op.create_index(
        "ix_snapshot_reflections_kind", "snapshot_reflections", ["snapshot_pk", "kind", "status"], unique=False
    )
    op.create_table(
        "snapshot_trajectories",
        sa.Column("snapshot_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("trajectory_pk", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("step_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["snapshot_pk"],
            ["snapshots.pk"],
            name=op.f("fk_snapshot_trajectories_snapshot_pk_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_pk", "trajectory_pk", name=op.f("pk_snapshot_trajectories")),
    )
    # Plain ADD COLUMN, never batch mode: see 0002.
    op.add_column("namespaces", sa.Column("frozen", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("namespaces", sa.Column("frozen_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("trajectories", sa.Column("parent_trajectory_id", sa.String(length=128), nullable=True))
    op.add_column("trajectories", sa.Column("attempt", sa.Integer(), nullable=True))
    op.create_index("ix_trajectories_ns_parent", "trajectories", ["namespace", "parent_trajectory_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_trajectories_ns_parent", table_name="trajectories")
    op.drop_column("trajectories", "attempt")
    op.drop_column("trajectories", "parent_trajectory_id")
    op.drop_column("namespaces", "frozen_at")
    op.drop_column("namespaces", "frozen")
    op.drop_table("snapshot_trajectories")
    op.drop_index("ix_snapshot_reflections_kind", table_name="snapshot_reflections")
    op.drop_table("snapshot_reflections")
    op.drop_index("ix_snapshot_evidence_reflection", table_name="snapshot_evidence")
    op.drop_table("snapshot_evidence")
    op.drop_index("ix_snapshot_embeddings_kind", table_name="snapshot_embeddings")
    op.drop_table("snapshot_embeddings")
    op.drop_table("snapshots")
