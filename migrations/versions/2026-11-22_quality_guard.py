"""quality guard

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 06:40:01.393728
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('chars_done', sa.Integer(), server_default='0', nullable=False))
    op.add_column('segments', sa.Column('quality', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True))


def downgrade() -> None:
    op.drop_column('segments', 'quality')
    op.drop_column('jobs', 'chars_done')
