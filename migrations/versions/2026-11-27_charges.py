"""charges and key locks: per-key caps reserved atomically

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 06:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('key_locks',
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('owner', name=op.f('pk_key_locks'))
    )
    op.create_table('charges',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('characters', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_charges'))
    )
    op.create_index('ix_charges_owner_at', 'charges', ['owner', 'at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_charges_owner_at', table_name='charges')
    op.drop_table('charges')
    op.drop_table('key_locks')
