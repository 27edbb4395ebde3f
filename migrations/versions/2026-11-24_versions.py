"""result versions and segment overrides (re-render)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 12:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.add_column('jobs', sa.Column('version', sa.Integer(), server_default='1', nullable=False))
    op.add_column('jobs', sa.Column('versions', JSON, server_default='{}', nullable=False))
    op.add_column('segments', sa.Column('overrides', JSON, nullable=True))


def downgrade() -> None:
    op.drop_column('segments', 'overrides')
    op.drop_column('jobs', 'versions')
    op.drop_column('jobs', 'version')
