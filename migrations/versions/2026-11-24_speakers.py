"""segment speakers

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 12:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('segments', sa.Column('speaker', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('segments', 'speaker')
