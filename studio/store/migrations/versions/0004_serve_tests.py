"""serve tests

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 11:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('serve_tests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('artifact_kind', sa.String(length=32), nullable=False),
    sa.Column('artifact_path', sa.String(length=2048), nullable=False),
    sa.Column('preferred_batch_sizes', sa.JSON(), nullable=False),
    sa.Column('max_queue_delay_us', sa.Integer(), nullable=False),
    sa.Column('max_batch_size', sa.Integer(), nullable=False),
    sa.Column('direct_p50_ms', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_serve_tests_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_serve_tests'))
    )
    with op.batch_alter_table('serve_tests', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_serve_tests_run_id'), ['run_id'], unique=False)

    op.create_table('serve_test_sweep',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('serve_test_id', sa.Integer(), nullable=False),
    sa.Column('batch', sa.Integer(), nullable=False),
    sa.Column('latency_ms', sa.Float(), nullable=False),
    sa.Column('throughput', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['serve_test_id'], ['serve_tests.id'], name=op.f('fk_serve_test_sweep_serve_test_id_serve_tests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_serve_test_sweep')),
    sa.UniqueConstraint('serve_test_id', 'batch', name=op.f('uq_serve_test_sweep_serve_test_id_batch'))
    )
    with op.batch_alter_table('serve_test_sweep', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_serve_test_sweep_serve_test_id'), ['serve_test_id'], unique=False)

    op.create_table('serve_test_load',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('serve_test_id', sa.Integer(), nullable=False),
    sa.Column('clients', sa.Integer(), nullable=False),
    sa.Column('dynamic_batching', sa.Boolean(), nullable=False),
    sa.Column('requests', sa.Integer(), nullable=False),
    sa.Column('errors', sa.Integer(), nullable=False),
    sa.Column('p50_ms', sa.Float(), nullable=False),
    sa.Column('p99_ms', sa.Float(), nullable=False),
    sa.Column('throughput', sa.Float(), nullable=False),
    sa.Column('overhead_ms', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['serve_test_id'], ['serve_tests.id'], name=op.f('fk_serve_test_load_serve_test_id_serve_tests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_serve_test_load')),
    sa.UniqueConstraint('serve_test_id', 'clients', 'dynamic_batching', name=op.f('uq_serve_test_load_serve_test_id_clients_dynamic_batching'))
    )
    with op.batch_alter_table('serve_test_load', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_serve_test_load_serve_test_id'), ['serve_test_id'], unique=False)


def downgrade() -> None:
    for table in ('serve_test_load', 'serve_test_sweep'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f'ix_{table}_serve_test_id'))
        op.drop_table(table)
    with op.batch_alter_table('serve_tests', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_serve_tests_run_id'))
    op.drop_table('serve_tests')
