"""segment events: every status change of a segment, written by a trigger

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 12:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The row each status change inserts: the segment as it is after the change.
COLUMNS = "job_id, segment_id, at, from_status, to_status, attempts, worker, error"
POSTGRES = [
    f"""CREATE FUNCTION narrator_segment_event() RETURNS trigger AS $$
    BEGIN
        INSERT INTO segment_events ({COLUMNS})
        VALUES (NEW.job_id, NEW.id, clock_timestamp(), OLD.status::text, NEW.status::text,
                NEW.attempts, NEW.worker, NEW.error);
        RETURN NULL;
    END $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER segment_events AFTER UPDATE OF status ON segments FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION narrator_segment_event()""",
]
SQLITE = [
    f"""CREATE TRIGGER segment_events AFTER UPDATE OF status ON segments FOR EACH ROW
    WHEN OLD.status IS NOT NEW.status
    BEGIN
        INSERT INTO segment_events ({COLUMNS})
        VALUES (NEW.job_id, NEW.id, strftime('%Y-%m-%d %H:%M:%f000', 'now'), OLD.status,
                NEW.status, NEW.attempts, NEW.worker, NEW.error);
    END""",
]


def upgrade() -> None:
    op.create_table('segment_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('segment_id', sa.Uuid(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('from_status', sa.String(length=16), nullable=False),
    sa.Column('to_status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=255), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_segment_events_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_segment_events'))
    )
    op.create_index(op.f('ix_segment_events_job_id'), 'segment_events', ['job_id'], unique=False)
    op.create_index(op.f('ix_segment_events_segment_id'), 'segment_events', ['segment_id'], unique=False)
    for statement in POSTGRES if op.get_bind().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS segment_events" + (
        " ON segments" if op.get_bind().dialect.name == "postgresql" else ""))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS narrator_segment_event()")
    op.drop_index(op.f('ix_segment_events_segment_id'), table_name='segment_events')
    op.drop_index(op.f('ix_segment_events_job_id'), table_name='segment_events')
    op.drop_table('segment_events')
