"""runs.evalsvc_version: the evalsvc version that started the run

Part of a run's provenance, shown by `evalsvc show` and written by `evalsvc
export`. Runs stored before are unknown (NULL).

Revision ID: 0007
Revises: 0006
"""

from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('evalsvc_version', sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('evalsvc_version')
