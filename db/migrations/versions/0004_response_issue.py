"""items.response_issue: why a token count or finish reason is unknown

Rows stored before responses were checked may hold impossible token counts
(negative, or beyond what PostgreSQL's INTEGER holds); they become unknown
(NULL) with the reason, so no statistic reads them.

Revision ID: 0004
Revises: 0003
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

COUNT_COLUMNS = ('prompt_tokens', 'completion_tokens', 'reasoning_tokens')


def upgrade() -> None:
    op.add_column('items', sa.Column('response_issue', sa.Text(), nullable=True))
    for column in COUNT_COLUMNS:
        op.execute(
            f"UPDATE items SET {column} = NULL, response_issue = '{column} stored before checks was impossible' "
            f"WHERE {column} < 0 OR {column} > 2147483647"
        )


def downgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.drop_column('response_issue')
