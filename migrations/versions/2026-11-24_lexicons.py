"""lexicons

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 11:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'lexicons',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('entries', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'),
                  nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_lexicons')),
        sa.UniqueConstraint('owner', 'name', name='uq_lexicons_owner_name'),
    )


def downgrade() -> None:
    op.drop_table('lexicons')
