"""The operator's counts without full scans: how often each reflection was served,
kept by the retrieval log's write (`reflection_served`, filled from the log as it
stands) instead of counting every logged item, and an index that holds the columns
the review queue, its count, the per-reflector numbers and the kind/status counts
read (`ix_reflections_ns_counters`) instead of reading every wide reflection row.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reflection_served",
        sa.Column("reflection_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("served", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["reflection_pk"],
            ["reflections.pk"],
            name=op.f("fk_reflection_served_reflection_pk_reflections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("reflection_pk", name=op.f("pk_reflection_served")),
    )
    op.create_index(
        op.f("ix_reflections_ns_counters"),
        "reflections",
        [
            "namespace",
            "reflector",
            "status",
            "kind",
            "uses",
            "reviewed_uses",
            "successes",
            "failures",
            "evidence_count",
            "pk",
        ],
        unique=False,
    )
    op.execute(
        "INSERT INTO reflection_served (reflection_pk, served) "
        "SELECT reflection_pk, count(*) FROM retrieval_items GROUP BY reflection_pk"
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_reflections_ns_counters"), table_name="reflections")
    op.drop_table("reflection_served")
