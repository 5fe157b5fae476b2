"""speed measurements

Revision ID: 0002
Revises: 0001
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('speed_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('workload', sa.String(length=20), nullable=False),
    sa.Column('measured', sa.Boolean(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('max_tokens', sa.Integer(), nullable=True),
    sa.Column('decode_tps_by_hand', sa.Float(), nullable=True),
    sa.Column('ttft_s_by_hand', sa.Float(), nullable=True),
    sa.Column('spec_stats', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('speed_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_speed_runs_endpoint_id'), ['endpoint_id'], unique=False)

    op.create_table('speed_samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('speed_run_id', sa.Integer(), nullable=False),
    sa.Column('prompt_id', sa.String(length=100), nullable=False),
    sa.Column('ttft_s', sa.Float(), nullable=True),
    sa.Column('decode_tps', sa.Float(), nullable=True),
    sa.Column('output_tokens', sa.Integer(), nullable=True),
    sa.Column('token_source', sa.String(length=10), nullable=True),
    sa.Column('total_s', sa.Float(), nullable=False),
    sa.Column('finish_reason', sa.String(length=50), nullable=True),
    sa.Column('accept_length', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['speed_run_id'], ['speed_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('speed_samples', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_speed_samples_speed_run_id'), ['speed_run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('speed_samples', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_speed_samples_speed_run_id'))

    op.drop_table('speed_samples')
    with op.batch_alter_table('speed_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_speed_runs_endpoint_id'))

    op.drop_table('speed_runs')
