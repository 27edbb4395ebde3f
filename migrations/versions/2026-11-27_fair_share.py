"""fair share: a job's priority, when each segment was dispatched, and an index of the
segments still waiting for dispatch

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
    op.add_column('segments', sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True))
    # Segments planned before dispatch existed were all enqueued at once.
    op.execute("UPDATE segments SET dispatched_at = CURRENT_TIMESTAMP WHERE status = 'pending'")
    waiting = "status = 'pending' AND dispatched_at IS NULL"
    op.create_index('ix_segments_job_waiting', 'segments', ['job_id', 'index'],
                    postgresql_where=sa.text(waiting), sqlite_where=sa.text(waiting))
    op.create_index('ix_jobs_model_status', 'jobs', ['model', 'status'])


def downgrade() -> None:
    op.drop_index('ix_jobs_model_status', table_name='jobs')
    op.drop_index('ix_segments_job_waiting', table_name='segments')
    op.drop_column('segments', 'dispatched_at')
    op.drop_column('jobs', 'priority')
