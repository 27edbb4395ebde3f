"""voices

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 06:08:58.211906
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('voices',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('model', sa.String(length=128), nullable=False),
    sa.Column('ref_text', sa.Text(), nullable=True),
    sa.Column('consent', sa.Text(), nullable=False),
    sa.Column('key', sa.String(length=1024), nullable=False),
    sa.Column('sample_rate', sa.Integer(), nullable=False),
    sa.Column('duration_seconds', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_voices'))
    )
    op.create_index('ix_voices_owner_id', 'voices', ['owner', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_voices_owner_id', table_name='voices')
    op.drop_table('voices')
