"""run isolation: how a run's HumanEval programs were sandboxed

HumanEval runs stored before this revision get the isolation their items
recorded (each item's detail holds it), "mixed" when they differ; runs that
execute no code keep NULL.

Revision ID: 0005
Revises: 0004
"""

from collections import defaultdict

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

_runs = sa.table('runs', sa.column('id', sa.Integer), sa.column('task', sa.String),
                 sa.column('isolation', sa.String))
_items = sa.table('items', sa.column('run_id', sa.Integer), sa.column('detail', sa.JSON))


def upgrade() -> None:
    op.add_column('runs', sa.Column('isolation', sa.String(20), nullable=True))
    conn = op.get_bind()
    seen: dict[int, set[str]] = defaultdict(set)
    rows = conn.execute(
        sa.select(_items.c.run_id, _items.c.detail)
        .select_from(_items.join(_runs, _runs.c.id == _items.c.run_id))
        .where(_runs.c.task == 'humaneval')
    )
    for run_id, detail in rows:
        if isinstance(detail, dict) and isinstance(detail.get('isolation'), str):
            seen[run_id].add(detail['isolation'][:20])
    for run_id, values in seen.items():
        value = values.pop() if len(values) == 1 else 'mixed'
        conn.execute(_runs.update().where(_runs.c.id == run_id).values(isolation=value))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('isolation')
