"""voice consents: a speaker's recorded consent, named by each cloned voice

Voices uploaded before this revision have no consent and are disabled until they are
uploaded again with one (POST /v1/audio/voice_consents, then POST /v1/audio/voices).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 07:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('voice_consents',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('language', sa.String(length=35), nullable=False),
    sa.Column('statement', sa.Text(), nullable=False),
    sa.Column('transcript', sa.Text(), nullable=False),
    sa.Column('word_error_rate', sa.Float(), nullable=False),
    sa.Column('key', sa.String(length=1024), nullable=False),
    sa.Column('duration_seconds', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_voice_consents'))
    )
    op.create_index('ix_voice_consents_owner_id', 'voice_consents', ['owner', 'id'])
    op.add_column('voices', sa.Column('consent_id', sa.Uuid(), nullable=True))
    op.create_index('ix_voices_consent_id', 'voices', ['consent_id'])


def downgrade() -> None:
    op.drop_index('ix_voices_consent_id', table_name='voices')
    op.drop_column('voices', 'consent_id')
    op.drop_index('ix_voice_consents_owner_id', table_name='voice_consents')
    op.drop_table('voice_consents')
