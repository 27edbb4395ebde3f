"""API keys kept in the database: only a SHA-256 digest of each key is stored."""

import hashlib
import secrets
import uuid
from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, utcnow, uuid7

PREFIX = "nk_"


def new_key() -> str:
    """Return a fresh random key (shown once, never stored)."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    """Return the stored form of a key: SHA-256, hex. Keys are random, so no slow hash."""
    return hashlib.sha256(key.encode()).hexdigest()


def owner_of(key: str) -> str:
    """Return the owner id a key's jobs carry: the same for table and NARRATOR_API_KEYS keys."""
    return owner_of_digest(digest(key))


def owner_of_digest(key_digest: str) -> str:
    """Return the owner id of the key with this digest."""
    return key_digest[:32]


class ApiKey(Base):
    """A named API key; revoked keys stay listed, and their jobs stay theirs."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    name: Mapped[str] = mapped_column(String(128))
    hint: Mapped[str] = mapped_column(String(16))  # the first characters, to recognise it
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    # Its share of the engines against other keys' (fair share: 2 gets twice a 1's slots).
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The job priorities it may ask for, comma-separated; None: JOB_PRIORITIES.
    priorities: Mapped[str | None] = mapped_column(String(32), default=None)
