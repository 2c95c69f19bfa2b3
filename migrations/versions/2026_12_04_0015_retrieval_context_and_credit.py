"""The retrieval log keeps what an operator needs to see what was served and what
it earned: the rendered context block exactly as the agent got it
(`retrievals.context`; null when no `render` was asked) and, per served item,
whether its outcome credited it (`retrieval_items.credited`; null until an outcome
is reported).

Neither can be recomputed from the rows that were there: a context is rendered
from the items' content and merged counts at serving time (edits and merges change
both since), and which items an outcome credits depends on `credit.unnamed_top_k`
and the namespace's freeze at reporting time. Rows logged before this revision keep
null ("not recorded").

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("retrievals", sa.Column("context", sa.Text(), nullable=True))
    op.add_column("retrieval_items", sa.Column("credited", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35): no batch copy of the log tables.
    op.drop_column("retrieval_items", "credited")
    op.drop_column("retrievals", "context")
