"""speed_samples.reasoning_tokens: the reasoning part of a speed sample's output tokens

Read from the stream's usage chunk, where the server puts it (OpenAI nests it,
SGLang reports it at the top level). Rows stored before have it unknown (NULL).

Revision ID: 0006
Revises: 0005
"""

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('speed_samples', sa.Column('reasoning_tokens', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('speed_samples') as batch:
        batch.drop_column('reasoning_tokens')
