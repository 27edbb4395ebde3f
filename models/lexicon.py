"""Pronunciation lexicons: an owner's named lists of respellings (core.lexicon applies them)."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, JsonType, utcnow, uuid7


class Lexicon(Base):
    """A named lexicon: jobs copy its entries when they are submitted, so editing or deleting
    it later changes no job already made (a resumed or retried job speaks as it began)."""

    __tablename__ = "lexicons"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_lexicons_owner_name"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    owner: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(128))
    entries: Mapped[list[dict[str, Any]]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
