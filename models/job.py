"""The job table, its segments and its append-only event log."""

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, JsonType, utcnow, uuid7


class JobStatus(enum.StrEnum):
    """States of a job; transitions are conditional UPDATEs (see models.transitions)."""

    queued = "queued"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


class SegmentStatus(enum.StrEnum):
    """States of one segment of a job."""

    pending = "pending"
    running = "running"
    done = "done"
    failed = "failed"


ACTIVE = (JobStatus.queued, JobStatus.in_progress)


def _enum(cls: type[enum.StrEnum], name: str) -> Enum:
    return Enum(
        cls, name=name, native_enum=False, create_constraint=True, length=16,
        values_callable=lambda e: [m.value for m in e],
    )


class Job(Base):
    """One asynchronous synthesis request: text in, media URLs out."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_owner_id", "owner", "id"),
        Index("ix_jobs_status", "status"),
        Index("ix_jobs_model_status", "model", "status"),  # the fair pick's active jobs
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    owner: Mapped[str] = mapped_column(String(64), default="")
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus, "job_status"),
                                              default=JobStatus.queued)
    model: Mapped[str] = mapped_column(String(128))
    voice: Mapped[str] = mapped_column(String(128))
    response_format: Mapped[str] = mapped_column(String(8))
    speed: Mapped[float] = mapped_column(Float, default=1.0)
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    chapters: Mapped[list[Any]] = mapped_column(JsonType)
    output_url: Mapped[str | None] = mapped_column(String(1024))
    webhook_url: Mapped[str | None] = mapped_column(String(2048))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    # "high", "normal" or "low": dispatch sends every high job's segments first
    # (models/segments.py fair_job).
    priority: Mapped[str] = mapped_column(String(8), default="normal", server_default="normal")
    # Its key's share of the engines when it was submitted (models.api_key.ApiKey.weight).
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    input_characters: Mapped[int] = mapped_column(Integer, default=0)
    segments_total: Mapped[int] = mapped_column(Integer, default=0)
    segments_done: Mapped[int] = mapped_column(Integer, default=0)
    segments_failed: Mapped[int] = mapped_column(Integer, default=0)
    chars_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    audio_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    result: Mapped[dict[str, Any] | None] = mapped_column()
    # Re-rendering (POST .../rerender) numbers the results: `result` is version `version`,
    # the earlier ones stay listed in `versions` (and downloadable) until the job's media goes.
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    versions: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    error: Mapped[dict[str, Any] | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    completed_at: Mapped[datetime | None] = mapped_column()
    expires_at: Mapped[datetime | None] = mapped_column()
    deleted_at: Mapped[datetime | None] = mapped_column()

    segments: Mapped[list["Segment"]] = relationship(back_populates="job", lazy="raise")


# Segments given to the engines: running, or dispatched to the broker and not yet running.
IN_FLIGHT = "status = 'running' OR (status = 'pending' AND dispatched_at IS NOT NULL)"


class Segment(Base):
    """A few sentences of a job, synthesised by one task into one part file."""

    __tablename__ = "segments"
    __table_args__ = (
        UniqueConstraint("job_id", "index", name="uq_segments_job_id_index"),
        Index("ix_segments_status_heartbeat_at", "status", "heartbeat_at"),
        Index("ix_segments_worker", "worker"),  # the reaper's dead-worker sweeps
        Index("ix_segments_job_waiting", "job_id", "index",  # dispatch: the next to send
              postgresql_where=sql_text("status = 'pending' AND dispatched_at IS NULL"),
              sqlite_where=sql_text("status = 'pending' AND dispatched_at IS NULL")),
        Index("ix_segments_in_flight", "job_id",  # dispatch: each key's and job's share
              postgresql_where=sql_text(IN_FLIGHT), sqlite_where=sql_text(IN_FLIGHT)),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid7)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    chapter: Mapped[int] = mapped_column(Integer, default=0)
    text: Mapped[str] = mapped_column(Text)
    pause_after: Mapped[float] = mapped_column(Float, default=0.0)
    # A `[voice:name]` mark's speaker (the job's cast gives the voice); None: the chapter's.
    speaker: Mapped[str | None] = mapped_column(String(64))
    # A re-render's changes for this segment: voice, seed, lexicon (merged entries).
    overrides: Mapped[dict[str, Any] | None] = mapped_column()
    status: Mapped[SegmentStatus] = mapped_column(_enum(SegmentStatus, "segment_status"),
                                                  default=SegmentStatus.pending)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    worker: Mapped[str | None] = mapped_column(String(255))  # who holds it while running
    # When its message went on the broker (workers/jobs/dispatch.py); None: still waiting.
    dispatched_at: Mapped[datetime | None] = mapped_column()
    samples: Mapped[int | None] = mapped_column(Integer)
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    quality: Mapped[dict[str, Any] | None] = mapped_column()  # the quality guard's flag

    job: Mapped[Job] = relationship(back_populates="segments", lazy="raise")


class JobEvent(Base):
    """One status transition of a job; rows are only ever inserted."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any] | None] = mapped_column()


class SegmentEvent(Base):
    """One status change of a segment, written by the database itself.

    A trigger on `segments` (migration 0010, for Postgres and SQLite) inserts a row whenever
    a segment's status changes, whichever statement of models/segments.py made it, with the
    segment's attempts, worker and error as they are after the change: a segment's history
    (claimed, spoken, lost with its worker, spoken again, retaken) is there without a second
    statement on the worker's hot path. Rows go with their job; a segment a re-render
    removes keeps its history until then (no foreign key to the segment).
    """

    __tablename__ = "segment_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    segment_id: Mapped[uuid.UUID] = mapped_column(index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_status: Mapped[str] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
