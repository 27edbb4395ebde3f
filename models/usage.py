"""What each key has been charged, and the row its submits take in turn.

`KeyLock` holds one row per key that has caps: a submit upserts it first, which locks it (a
row lock on Postgres, the write lock on SQLite) until the submit commits, so concurrent
submits of one key check and insert one after another. `Charge` is the ledger of characters
charged per key (jobs and re-renders), summed over the last 24 hours for the daily quota.
"""

import uuid
from datetime import datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, utcnow, uuid7


class KeyLock(Base):
    """A key's lock row (see the module's docstring)."""

    __tablename__ = "key_locks"

    owner: Mapped[str] = mapped_column(String(64), primary_key=True)


class Charge(Base):
    """Characters charged to a key at a time, for a job (a submit or a re-render)."""

    __tablename__ = "charges"
    __table_args__ = (Index("ix_charges_owner_at", "owner", "at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    owner: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    characters: Mapped[int] = mapped_column()
    job_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
