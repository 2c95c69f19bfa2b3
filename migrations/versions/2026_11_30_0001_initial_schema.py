"""Initial schema: namespaces, API keys, trajectories, steps, reflections (with evidence,
versions and embeddings), the index change feed, jobs, retrievals and their outcomes.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30 06:26:54.105312
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('namespaces', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('description', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash'))
    )
    op.create_table('index_changes',
    sa.Column('seq', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('reflection_pk', sa.BigInteger(), nullable=False),
    sa.Column('op', sa.String(length=8), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('seq', name=op.f('pk_index_changes')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('index_changes', schema=None) as batch_op:
        batch_op.create_index('ix_index_changes_ns_seq', ['namespace', 'seq'], unique=False)

    op.create_table('namespaces',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('settings', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_namespaces'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('dedup_key', sa.String(length=300), nullable=True),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('run_after', sa.DateTime(timezone=True), nullable=False),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('locked_by', sa.String(length=100), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_jobs_namespace_namespaces'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_claim', ['status', 'run_after'], unique=False)
        batch_op.create_index('ix_jobs_dedup_key', ['dedup_key'], unique=False)
        batch_op.create_index('ix_jobs_ns_status', ['namespace', 'status', 'id'], unique=False)
        batch_op.create_index('uq_jobs_dedup_queued', ['dedup_key'], unique=True, sqlite_where=sa.text("status = 'queued'"), postgresql_where=sa.text("status = 'queued'"))

    op.create_table('reflections',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=12), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('content', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('environment', sa.String(length=200), nullable=True),
    sa.Column('task', sa.Text(), nullable=True),
    sa.Column('reflector', sa.String(length=100), nullable=False),
    sa.Column('reflector_version', sa.String(length=40), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=True),
    sa.Column('evidence_count', sa.Integer(), nullable=False),
    sa.Column('evidence_successes', sa.Integer(), nullable=False),
    sa.Column('evidence_failures', sa.Integer(), nullable=False),
    sa.Column('evidence_value', sa.Float(), nullable=True),
    sa.Column('uses', sa.Integer(), nullable=False),
    sa.Column('successes', sa.Integer(), nullable=False),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('reward_sum', sa.Float(), nullable=False),
    sa.Column('source_key', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_reflections_namespace_namespaces'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_reflections')),
    sa.UniqueConstraint('namespace', 'id', name=op.f('uq_reflections_namespace_id')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('reflections', schema=None) as batch_op:
        batch_op.create_index('ix_reflections_ns_kind_status', ['namespace', 'kind', 'status', 'pk'], unique=False)

    op.create_table('retrievals',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('query', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('trajectory_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_retrievals_namespace_namespaces'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_retrievals'))
    )
    with op.batch_alter_table('retrievals', schema=None) as batch_op:
        batch_op.create_index('ix_retrievals_ns_created', ['namespace', 'created_at'], unique=False)

    op.create_table('trajectories',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('task', sa.Text(), nullable=False),
    sa.Column('task_hash', sa.String(length=16), nullable=False),
    sa.Column('environment', sa.String(length=200), nullable=True),
    sa.Column('agent', sa.String(length=200), nullable=True),
    sa.Column('policy_version', sa.String(length=200), nullable=True),
    sa.Column('group_id', sa.String(length=128), nullable=True),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('retrieval_ids', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('status', sa.String(length=8), nullable=False),
    sa.Column('success', sa.Boolean(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('outcome_details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('step_count', sa.Integer(), nullable=False),
    sa.Column('request_hash', sa.String(length=64), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('closed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_trajectories_namespace_namespaces'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_trajectories')),
    sa.UniqueConstraint('namespace', 'id', name=op.f('uq_trajectories_namespace_id')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('trajectories', schema=None) as batch_op:
        batch_op.create_index('ix_trajectories_ns_env', ['namespace', 'environment', 'pk'], unique=False)
        batch_op.create_index('ix_trajectories_ns_group', ['namespace', 'group_id'], unique=False)
        batch_op.create_index('ix_trajectories_ns_task', ['namespace', 'task_hash', 'pk'], unique=False)

    op.create_table('embeddings',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('reflection_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('field', sa.String(length=16), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('dim', sa.Integer(), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['reflection_pk'], ['reflections.pk'], name=op.f('fk_embeddings_reflection_pk_reflections'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_embeddings')),
    sa.UniqueConstraint('reflection_pk', 'field', 'model', name=op.f('uq_embeddings_reflection_pk_field_model')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('embeddings', schema=None) as batch_op:
        batch_op.create_index('ix_embeddings_ns_kind', ['namespace', 'kind', 'field', 'model'], unique=False)

    op.create_table('reflection_evidence',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('reflection_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('trajectory_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('step_start', sa.Integer(), nullable=True),
    sa.Column('step_end', sa.Integer(), nullable=True),
    sa.Column('success', sa.Boolean(), nullable=True),
    sa.Column('value', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['reflection_pk'], ['reflections.pk'], name=op.f('fk_reflection_evidence_reflection_pk_reflections'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['trajectory_pk'], ['trajectories.pk'], name=op.f('fk_reflection_evidence_trajectory_pk_trajectories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_reflection_evidence')),
    sa.UniqueConstraint('reflection_pk', 'trajectory_pk', 'step_start', name=op.f('uq_reflection_evidence_reflection_pk_trajectory_pk_step_start')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('reflection_evidence', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reflection_evidence_reflection_pk'), ['reflection_pk'], unique=False)
        batch_op.create_index('ix_reflection_evidence_trajectory', ['trajectory_pk'], unique=False)

    op.create_table('reflection_versions',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('reflection_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=12), nullable=False),
    sa.Column('content', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('actor', sa.String(length=100), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['reflection_pk'], ['reflections.pk'], name=op.f('fk_reflection_versions_reflection_pk_reflections'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_reflection_versions')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('reflection_versions', schema=None) as batch_op:
        batch_op.create_index('ix_reflection_versions_reflection', ['reflection_pk', 'pk'], unique=False)

    op.create_table('retrieval_items',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('retrieval_id', sa.String(length=64), nullable=False),
    sa.Column('reflection_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('score', sa.Float(), nullable=False),
    sa.Column('similarity', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['reflection_pk'], ['reflections.pk'], name=op.f('fk_retrieval_items_reflection_pk_reflections'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['retrieval_id'], ['retrievals.id'], name=op.f('fk_retrieval_items_retrieval_id_retrievals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_retrieval_items')),
    sa.UniqueConstraint('retrieval_id', 'reflection_pk', name=op.f('uq_retrieval_items_retrieval_id_reflection_pk')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('retrieval_items', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_retrieval_items_reflection_pk'), ['reflection_pk'], unique=False)

    op.create_table('retrieval_outcomes',
    sa.Column('retrieval_id', sa.String(length=64), nullable=False),
    sa.Column('success', sa.Boolean(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=True),
    sa.Column('details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('trajectory_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['retrieval_id'], ['retrievals.id'], name=op.f('fk_retrieval_outcomes_retrieval_id_retrievals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('retrieval_id', name=op.f('pk_retrieval_outcomes'))
    )
    op.create_table('steps',
    sa.Column('pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('trajectory_pk', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('observation', sa.Text(), nullable=False),
    sa.Column('state_data', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('internal_state', sa.Text(), nullable=True),
    sa.Column('action', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('result', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=True),
    sa.Column('done', sa.Boolean(), nullable=False),
    sa.Column('truncated', sa.Boolean(), nullable=False),
    sa.Column('caused_failure', sa.Boolean(), nullable=False),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['trajectory_pk'], ['trajectories.pk'], name=op.f('fk_steps_trajectory_pk_trajectories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_steps')),
    sa.UniqueConstraint('trajectory_pk', 'index', name=op.f('uq_steps_trajectory_pk_index')),
    sqlite_autoincrement=True
    )


def downgrade() -> None:
    op.drop_table('steps')
    op.drop_table('retrieval_outcomes')
    with op.batch_alter_table('retrieval_items', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_retrieval_items_reflection_pk'))

    op.drop_table('retrieval_items')
    with op.batch_alter_table('reflection_versions', schema=None) as batch_op:
        batch_op.drop_index('ix_reflection_versions_reflection')

    op.drop_table('reflection_versions')
    with op.batch_alter_table('reflection_evidence', schema=None) as batch_op:
        batch_op.drop_index('ix_reflection_evidence_trajectory')
        batch_op.drop_index(batch_op.f('ix_reflection_evidence_reflection_pk'))

    op.drop_table('reflection_evidence')
    with op.batch_alter_table('embeddings', schema=None) as batch_op:
        batch_op.drop_index('ix_embeddings_ns_kind')

    op.drop_table('embeddings')
    with op.batch_alter_table('trajectories', schema=None) as batch_op:
        batch_op.drop_index('ix_trajectories_ns_task')
        batch_op.drop_index('ix_trajectories_ns_group')
        batch_op.drop_index('ix_trajectories_ns_env')

    op.drop_table('trajectories')
    with op.batch_alter_table('retrievals', schema=None) as batch_op:
        batch_op.drop_index('ix_retrievals_ns_created')

    op.drop_table('retrievals')
    with op.batch_alter_table('reflections', schema=None) as batch_op:
        batch_op.drop_index('ix_reflections_ns_kind_status')

    op.drop_table('reflections')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('uq_jobs_dedup_queued', sqlite_where=sa.text("status = 'queued'"), postgresql_where=sa.text("status = 'queued'"))
        batch_op.drop_index('ix_jobs_ns_status')
        batch_op.drop_index('ix_jobs_dedup_key')
        batch_op.drop_index('ix_jobs_claim')

    op.drop_table('jobs')
    op.drop_table('namespaces')
    with op.batch_alter_table('index_changes', schema=None) as batch_op:
        batch_op.drop_index('ix_index_changes_ns_seq')

    op.drop_table('index_changes')
    op.drop_table('api_keys')
