"""Uploaded voices and the consents that allow them."""

import uuid
from datetime import datetime

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, utcnow, uuid7


class VoiceConsent(Base):
    """A speaker's recorded consent to have their voice cloned (core/consent.py).

    `statement` is what the recording had to say and `transcript` what the recogniser heard
    in it; the recording itself is kept at `key` (FLAC) for a person to hear. Deleting a
    consent disables the voices that name it (their `consent_id` is cleared)."""

    __tablename__ = "voice_consents"
    __table_args__ = (Index("ix_voice_consents_owner_id", "owner", "id"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    owner: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(128))
    language: Mapped[str] = mapped_column(String(35))
    statement: Mapped[str] = mapped_column(Text)
    transcript: Mapped[str] = mapped_column(Text)
    word_error_rate: Mapped[float] = mapped_column(Float)
    key: Mapped[str] = mapped_column(String(1024))
    duration_seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Voice(Base):
    """An uploaded reference clip that Base (voice-clone) checkpoints speak with; usable
    while its consent exists (`consent_id`). `consent` keeps the statement consented to."""

    __tablename__ = "voices"
    __table_args__ = (Index("ix_voices_owner_id", "owner", "id"),
                      Index("ix_voices_consent_id", "consent_id"))

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    owner: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    ref_text: Mapped[str | None] = mapped_column(Text)
    consent: Mapped[str] = mapped_column(Text)
    consent_id: Mapped[uuid.UUID | None] = mapped_column()
    key: Mapped[str] = mapped_column(String(1024))
    sample_rate: Mapped[int] = mapped_column(Integer)
    duration_seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
