"""Job state machine: every transition is a conditional UPDATE plus an event row."""

import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Insert, Update, insert, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from models.base import utcnow
from models.job import Job, JobEvent, JobStatus


def _update(job_id: uuid.UUID, expected: JobStatus, to: JobStatus,
            values: dict[str, Any]) -> Update:
    return (
        update(Job)
        .where(Job.id == job_id, Job.status == expected)
        .values(status=to, updated_at=utcnow(), **values)
        .returning(Job.id)
    )


def _event(job_id: uuid.UUID, expected: JobStatus, to: JobStatus,
           detail: dict[str, Any] | None) -> Insert:
    return insert(JobEvent).values(job_id=job_id, from_status=expected.value,
                                   to_status=to.value, detail=detail, at=utcnow())


def transition(session: Session, job_id: uuid.UUID, expected: Iterable[JobStatus],
               to: JobStatus, detail: dict[str, Any] | None = None,
               **values: Any) -> JobStatus | None:
    """Move a job from one of `expected` to `to`; return the state it left, or None."""
    for state in expected:
        if session.execute(_update(job_id, state, to, values)).first() is not None:
            session.execute(_event(job_id, state, to, detail))
            return state
    return None


async def atransition(session: AsyncSession, job_id: uuid.UUID, expected: Iterable[JobStatus],
                      to: JobStatus, detail: dict[str, Any] | None = None,
                      **values: Any) -> JobStatus | None:
    """Async twin of `transition`, for the API."""
    for state in expected:
        if (await session.execute(_update(job_id, state, to, values))).first() is not None:
            await session.execute(_event(job_id, state, to, detail))
            return state
    return None
