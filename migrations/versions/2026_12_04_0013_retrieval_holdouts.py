"""Interventional utility: the items each logged retrieval put to the holdout draw
(`credit.holdout_rate`), served or withheld, with the unit randomised (the episode,
or the retrieval without one). The causal effect estimate reads only these rows
(service/retrieval/holdout.py). Retrievals logged before this revision have none.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _pk() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "retrieval_holdouts",
        sa.Column("pk", _pk(), autoincrement=True, nullable=False),
        sa.Column("retrieval_id", sa.String(length=64), nullable=False),
        sa.Column("reflection_pk", _pk(), nullable=False),
        sa.Column("withheld", sa.Boolean(), nullable=False),
        sa.Column("unit", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["reflection_pk"],
            ["reflections.pk"],
            name=op.f("fk_retrieval_holdouts_reflection_pk_reflections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["retrieval_id"],
            ["retrievals.id"],
            name=op.f("fk_retrieval_holdouts_retrieval_id_retrievals"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_retrieval_holdouts")),
        sa.UniqueConstraint(
            "retrieval_id", "reflection_pk", name=op.f("uq_retrieval_holdouts_retrieval_id_reflection_pk")
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_retrieval_holdouts_reflection_pk"), "retrieval_holdouts", ["reflection_pk"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_retrieval_holdouts_reflection_pk"), table_name="retrieval_holdouts")
    op.drop_table("retrieval_holdouts")
