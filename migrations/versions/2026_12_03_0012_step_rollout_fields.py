"""Per-step rollout records, so a trainer can measure staleness later: the policy
that acted at the step (`policy_version`; null: the trajectory's applies) and the
inference engine's per-token log-probs of the step's action (`rollout_logprobs`)
with, optionally, the token ids they belong to (`rollout_token_ids`).

Steps stored before this revision have none of them (null), and their content
hashes are unchanged: an unset new field is left out of a step's hash
(service/trajectories/ingest.py), so a retry of such a step still replays.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMN (nullable), never batch mode: see 0002.
    op.add_column("steps", sa.Column("policy_version", sa.String(length=200), nullable=True))
    op.add_column("steps", sa.Column("rollout_logprobs", _json(), nullable=True))
    op.add_column("steps", sa.Column("rollout_token_ids", _json(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35): a batch copy of `steps` is not needed.
    op.drop_column("steps", "rollout_token_ids")
    op.drop_column("steps", "rollout_logprobs")
    op.drop_column("steps", "policy_version")
