"""fragments: the encoded fragments of a job's book as they land, for its live stream

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 21:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'fragments',
        sa.Column('job_id', sa.Uuid(), nullable=False),
        sa.Column('first', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('last', sa.Integer(), nullable=False),
        sa.Column('chapter', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(length=300), nullable=False),
        sa.Column('samples', sa.Integer(), nullable=False),
        sa.Column('rate', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_fragments_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('job_id', 'first', name=op.f('pk_fragments')))


def downgrade() -> None:
    op.drop_table('fragments')
