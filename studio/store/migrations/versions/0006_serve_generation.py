"""serve tests of generation runs: tokens/s, TTFT and TPOT with and without continuous batching

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 03:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('serve_tests', schema=None) as batch_op:
        batch_op.add_column(sa.Column('workload', sa.String(length=16), nullable=False, server_default='infer'))
        batch_op.add_column(sa.Column('prompt_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('new_tokens', sa.Integer(), nullable=True))

    op.create_table('serve_test_generation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('serve_test_id', sa.Integer(), nullable=False),
    sa.Column('clients', sa.Integer(), nullable=False),
    sa.Column('continuous_batching', sa.Boolean(), nullable=False),
    sa.Column('requests', sa.Integer(), nullable=False),
    sa.Column('errors', sa.Integer(), nullable=False),
    sa.Column('tokens', sa.Integer(), nullable=False),
    sa.Column('tokens_per_s', sa.Float(), nullable=False),
    sa.Column('ttft_p50_ms', sa.Float(), nullable=True),
    sa.Column('ttft_p99_ms', sa.Float(), nullable=True),
    sa.Column('tpot_p50_ms', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['serve_test_id'], ['serve_tests.id'], name=op.f('fk_serve_test_generation_serve_test_id_serve_tests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_serve_test_generation')),
    sa.UniqueConstraint('serve_test_id', 'clients', 'continuous_batching', name=op.f('uq_serve_test_generation_serve_test_id_clients_continuous_batching'))
    )
    with op.batch_alter_table('serve_test_generation', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_serve_test_generation_serve_test_id'), ['serve_test_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('serve_test_generation', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_serve_test_generation_serve_test_id'))
    op.drop_table('serve_test_generation')
    with op.batch_alter_table('serve_tests', schema=None) as batch_op:
        batch_op.drop_column('new_tokens')
        batch_op.drop_column('prompt_tokens')
        batch_op.drop_column('workload')
