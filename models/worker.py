"""Live workers, as the database knows them: a heartbeat refreshed every few seconds.

A segment records the worker that holds it; the reaper takes a segment whose worker has
stopped beating for lost, however long a segment may take (procrastinate's model).
"""

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, utcnow


class WorkerBeat(Base):
    """One worker process: its id (host:pid) and when it last proved it was alive."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
