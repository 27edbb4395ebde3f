"""worker liveness

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 13:20:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'workers',
        sa.Column('id', sa.String(length=255), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workers')),
    )
    op.add_column('segments', sa.Column('worker', sa.String(length=255), nullable=True))
    op.create_index('ix_segments_worker', 'segments', ['worker'])


def downgrade() -> None:
    op.drop_index('ix_segments_worker', table_name='segments')
    op.drop_column('segments', 'worker')
    op.drop_table('workers')
