"""The encoded fragments of a job's book, as they land: what its live stream plays.

A worker that keeps an MP3 or AAC fragment (workers/book/progressive.py as segments finish,
the assembly for the rest) records it here: the segments it covers, its storage key and how
many samples it decodes to. The API serves a job's HLS playlist from these rows
(api/routes/listen.py): the fragments from the book's start with no gap, in order.
"""

import uuid
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from models.base import Base


class Fragment(Base):
    """One encoded fragment of a job's book: segments `first` to `last` of one chapter."""

    __tablename__ = "fragments"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                              primary_key=True)
    first: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last: Mapped[int] = mapped_column(Integer)
    chapter: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(300))
    samples: Mapped[int] = mapped_column(Integer)  # what it decodes to, every frame counted
    rate: Mapped[int] = mapped_column(Integer)


def record(session: Session, job_id: uuid.UUID, first: int, last: int, chapter: int, key: str,
           samples: int, rate: int) -> None:
    """Insert the fragment that starts at segment `first`, or replace the one recorded there
    (a segment synthesised again makes a new fragment under another key)."""
    build = postgresql.insert if session.get_bind().dialect.name == "postgresql" \
        else sqlite.insert
    values = {"last": last, "chapter": chapter, "key": key, "samples": samples, "rate": rate}
    session.execute(build(Fragment).values(job_id=job_id, first=first, **values)
                    .on_conflict_do_update(index_elements=[Fragment.job_id, Fragment.first],
                                           set_=values))


def replace(session: Session, job_id: uuid.UUID, fragments: list[dict[str, Any]]) -> None:
    """Make `fragments` (record's arguments by name) the job's whole record: what its
    completed book was joined from, or nothing once its parts are deleted."""
    session.execute(delete(Fragment).where(Fragment.job_id == job_id))
    for fragment in fragments:
        record(session, job_id, **fragment)
