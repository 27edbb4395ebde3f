"""key weights: a stored key's share of the engines and the priorities it may ask for; a
job carries the weight its key had when it was submitted; an index of the segments in flight

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 18:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('api_keys', sa.Column('weight', sa.Integer(), server_default='1',
                                        nullable=False))
    op.add_column('api_keys', sa.Column('priorities', sa.String(length=32), nullable=True))
    op.add_column('jobs', sa.Column('weight', sa.Integer(), server_default='1', nullable=False))
    in_flight = "status = 'running' OR (status = 'pending' AND dispatched_at IS NOT NULL)"
    op.create_index('ix_segments_in_flight', 'segments', ['job_id'],
                    postgresql_where=sa.text(in_flight), sqlite_where=sa.text(in_flight))


def downgrade() -> None:
    op.drop_index('ix_segments_in_flight', table_name='segments')
    op.drop_column('jobs', 'weight')
    op.drop_column('api_keys', 'priorities')
    op.drop_column('api_keys', 'weight')
