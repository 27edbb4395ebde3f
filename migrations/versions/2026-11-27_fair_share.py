"""fair share: a job's priority, and an index of each job's pending segments

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 15:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('priority', sa.String(length=8), server_default='normal',
                                    nullable=False))
    op.create_index('ix_segments_job_pending', 'segments', ['job_id', 'index'],
                    postgresql_where=sa.text("status = 'pending'"),
                    sqlite_where=sa.text("status = 'pending'"))
    op.create_index('ix_jobs_model_status', 'jobs', ['model', 'status'])


def downgrade() -> None:
    op.drop_index('ix_jobs_model_status', table_name='jobs')
    op.drop_index('ix_segments_job_pending', table_name='segments')
    op.drop_column('jobs', 'priority')
