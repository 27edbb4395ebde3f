"""Segment state machine: every change to a segment row, as one conditional statement.

A segment is `pending` (planned, waiting for a worker; `worker` set once one has taken its
message off the broker), `running` (claimed by one worker, whose heartbeat keeps it fresh),
`done` (its part is written) or `failed` (out of attempts). Each function here builds the one
statement for one change, with the condition that makes it safe to run twice or at the same
time as any other: a claim only takes a pending segment, a finish only a segment this worker
still runs, and so on. Callers execute them on their own session (sync in the workers, async
in the API) inside their own transaction, beside the job's own change (models.transitions).

Nothing outside this module updates or deletes segment rows (tests/test_segments.py checks).
"""

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Float,
    ScalarSelect,
    Select,
    Update,
    case,
    cast,
    delete,
    exists,
    func,
    select,
    update,
)

from models.base import utcnow
from models.job import Job, JobStatus, Segment, SegmentStatus

PENDING, RUNNING, DONE, FAILED = (SegmentStatus.pending, SegmentStatus.running,
                                  SegmentStatus.done, SegmentStatus.failed)


# Workers: a segment's run.

def reserved(segment_id: uuid.UUID, worker: str) -> Update:
    """pending → pending, taken off the broker by `worker` (the reaper hands on the pending
    segments of dead workers too)."""
    return update(Segment).where(Segment.id == segment_id, Segment.status == PENDING) \
        .values(worker=worker)


def claimed(segment_id: uuid.UUID, worker: str, *returning: Any) -> Update:
    """pending → running by `worker`, one more attempt, if its job is in progress."""
    job_running = exists().where(Job.id == Segment.job_id, Job.status == JobStatus.in_progress)
    return (update(Segment)
            .where(Segment.id == segment_id, Segment.status == PENDING, job_running)
            .values(status=RUNNING, attempts=Segment.attempts + 1, heartbeat_at=utcnow(),
                    worker=worker)
            .returning(*returning))


# Dispatch: which waiting segments go on the broker next (workers/jobs/dispatch.py).

PRIORITY_RANK = case((Job.priority == "high", 0), (Job.priority == "low", 2), else_=1)
# Given to the engines: running, or on the broker (dispatched) and not yet running.
IN_FLIGHT = (Segment.status == RUNNING) | ((Segment.status == PENDING)
                                           & Segment.dispatched_at.is_not(None))


def fair_job(model: str, among: int | None = None) -> Select[uuid.UUID]:
    """The job whose segment goes on `model`'s queue next: of the jobs in progress with a
    segment not yet dispatched, the highest priority; then the key (owner) with the fewest
    of this model's segments in flight for its weight, so that keys share its engines in
    proportion to their weights (equally by default); then, within it, the job with the
    fewest, so that a key's jobs take turns; then the oldest.

    With `among`, only the first `among` jobs in that order are asked whether they have a
    segment waiting: with 10,000 jobs in progress, asking each took most of a pick. It finds
    none only when as many jobs ahead have all their segments dispatched (the caller then
    asks again without it)."""
    by_job = (select(Segment.job_id, func.count().label("n"))
              .where(IN_FLIGHT).group_by(Segment.job_id).subquery())
    by_owner = (select(Job.owner, func.count().label("n"))
                .join(Segment, Segment.job_id == Job.id)
                .where(IN_FLIGHT, Job.model == model).group_by(Job.owner).subquery())
    keys = (PRIORITY_RANK.label("rank"),
            (cast(func.coalesce(by_owner.c.n, 0), Float) / Job.weight).label("share"),
            func.coalesce(by_job.c.n, 0).label("turn"), Job.id.label("id"))
    ordered = (select(*keys)
               .outerjoin(by_job, by_job.c.job_id == Job.id)
               .outerjoin(by_owner, by_owner.c.owner == Job.owner)
               .where(Job.model == model, Job.status == JobStatus.in_progress)
               .order_by(*keys[:3], Job.id).limit(among).subquery())
    waiting = exists().where(Segment.job_id == ordered.c.id, Segment.status == PENDING,
                             Segment.dispatched_at.is_(None))
    return (select(ordered.c.id).where(waiting)
            .order_by(ordered.c.rank, ordered.c.share, ordered.c.turn, ordered.c.id).limit(1))


def queue_of_job() -> tuple[ScalarSelect[int], ScalarSelect[int]]:
    """Scalar subqueries of a job row (correlated to `Job`): its segments waiting for
    dispatch, and those in flight (dispatched or running)."""
    waiting = (select(func.count()).select_from(Segment)
               .where(Segment.job_id == Job.id, Segment.status == PENDING,
                      Segment.dispatched_at.is_(None)).scalar_subquery())
    in_flight = (select(func.count()).select_from(Segment)
                 .where(Segment.job_id == Job.id, IN_FLIGHT).scalar_subquery())
    return waiting, in_flight


def waiting_models() -> Select[str]:
    """The models with segments of jobs in progress still waiting for dispatch."""
    waiting = exists().where(Segment.job_id == Job.id, Segment.status == PENDING,
                             Segment.dispatched_at.is_(None))
    return select(Job.model).where(Job.status == JobStatus.in_progress, waiting).distinct()


def waiting_counts() -> Select[str, str, str, int]:
    """Segments waiting for dispatch, by model, owner and priority (/metrics)."""
    return (select(Job.model, Job.owner, Job.priority, func.count())
            .join(Segment, Segment.job_id == Job.id)
            .where(Job.status == JobStatus.in_progress, Segment.status == PENDING,
                   Segment.dispatched_at.is_(None))
            .group_by(Job.model, Job.owner, Job.priority))


def queued(model: str) -> Select[int]:
    """How many of `model`'s segments are on the broker and not yet running."""
    return (select(func.count()).select_from(Segment).join(Job, Job.id == Segment.job_id)
            .where(Job.model == model, Job.status == JobStatus.in_progress,
                   Segment.status == PENDING, Segment.dispatched_at.is_not(None)))


def dispatched(job_id: uuid.UUID, now: datetime, worker: str) -> Update:
    """The first waiting segment of `job_id` → dispatched by `worker` (its message goes on
    the broker after the commit; should the worker die before sending it, the reaper's
    dead-worker sweep sends it); on Postgres one another dispatcher is taking is skipped.
    Returns its id."""
    first = (select(Segment.id)
             .where(Segment.job_id == job_id, Segment.status == PENDING,
                    Segment.dispatched_at.is_(None))
             .order_by(Segment.index).limit(1).with_for_update(skip_locked=True))
    return (update(Segment)
            .where(Segment.id == first.scalar_subquery(), Segment.dispatched_at.is_(None))
            .values(dispatched_at=now, worker=worker).returning(Segment.id))


def finished(segment_id: uuid.UUID, worker: str, samples: int, seconds: float,
             quality: dict[str, Any] | None, extra_runs: int) -> Update:
    """running by `worker` → done (not if it was handed on meanwhile); returns its id."""
    return (update(Segment)
            .where(Segment.id == segment_id, Segment.status == RUNNING,
                   Segment.worker == worker)
            .values(status=DONE, samples=samples, duration_seconds=seconds,
                    heartbeat_at=utcnow(), error=None, quality=quality,
                    attempts=Segment.attempts + extra_runs)
            .returning(Segment.id))


def released(segment_id: uuid.UUID, worker: str, retry: bool, error: str) -> Update:
    """running by `worker` → pending (to run again) or failed (out of attempts)."""
    return (update(Segment)
            .where(Segment.id == segment_id, Segment.status == RUNNING,
                   Segment.worker == worker)
            .values(status=PENDING if retry else FAILED, error=error[:2000]))


def handed_back(worker: str) -> Update:
    """running or pending by `worker` → pending, nobody's: a stopping worker gives back what
    it holds (a running one gets back its attempt: a deploy is not the segment's fault).
    Returns (id, job id)."""
    return (update(Segment)
            .where(Segment.worker == worker, Segment.status.in_([RUNNING, PENDING]))
            .values(status=PENDING, worker=None, heartbeat_at=utcnow(),
                    attempts=case((Segment.status == RUNNING, Segment.attempts - 1),
                                  else_=Segment.attempts))
            .returning(Segment.id, Segment.job_id))


def beaten(held: Iterable[uuid.UUID], worker: str, now: datetime) -> Update:
    """running by `worker`: its heartbeat is now (the worker is alive and still runs it)."""
    return update(Segment).where(Segment.id.in_(list(held)), Segment.status == RUNNING,
                                 Segment.worker == worker).values(heartbeat_at=now)


# The reaper: work whose worker was lost.

def lost(live_since: datetime) -> ColumnElement[bool]:
    """Running segments nobody has beaten for since `live_since`."""
    return (Segment.status == RUNNING) & (Segment.heartbeat_at < live_since)


def lost_for_good(live_since: datetime, max_attempts: int, now: datetime) -> Update:
    """lost running → failed, out of attempts. Returns (id, job id)."""
    return (update(Segment).where(lost(live_since), Segment.attempts >= max_attempts)
            .values(status=FAILED, heartbeat_at=now,
                    error=f"worker lost while running, {max_attempts} times")
            .returning(Segment.id, Segment.job_id))


def lost_again(live_since: datetime, now: datetime) -> Update:
    """lost running → pending, nobody's. Returns (id, attempts, job id)."""
    return (update(Segment).where(lost(live_since))
            .values(status=PENDING, heartbeat_at=now, worker=None,
                    error="worker lost while running; re-enqueued by the reaper")
            .returning(Segment.id, Segment.attempts, Segment.job_id))


def orphans_freed(orphaned: ColumnElement[bool], now: datetime) -> Update:
    """pending (matching `orphaned`: taken by a dead worker) → pending, nobody's, to be
    enqueued again. Returns (id, job id)."""
    return (update(Segment).where(Segment.status == PENDING, orphaned)
            .values(worker=None, heartbeat_at=now)
            .returning(Segment.id, Segment.job_id))


def requeued(ids: Iterable[uuid.UUID], now: datetime) -> Update:
    """pending: enqueued again now (its heartbeat says when)."""
    return update(Segment).where(Segment.id.in_(list(ids))).values(heartbeat_at=now)


# Assembly: parts lost or heard badly.

def part_lost(segment_id: uuid.UUID, error: str) -> Update:
    """done → pending: its part is gone from storage. Returns its id."""
    return (update(Segment).where(Segment.id == segment_id, Segment.status == DONE)
            .values(status=PENDING, error=error[:2000]).returning(Segment.id))


def retaken(segment_id: uuid.UUID, attempts: int, quality: dict[str, Any]) -> Update:
    """done (at `attempts`) → pending, nobody's, to be spoken again; `quality` keeps its
    earlier takes. Returns its id."""
    return (update(Segment)
            .where(Segment.id == segment_id, Segment.status == DONE,
                   Segment.attempts == attempts)
            .values(status=PENDING, worker=None, quality=quality).returning(Segment.id))


def take_restored(segment_id: uuid.UUID, at_attempts: int, **values: Any) -> Update:
    """done: an earlier, better take becomes its audio again (once: only while it is at
    `at_attempts`). Returns its id."""
    return (update(Segment).where(Segment.id == segment_id, Segment.attempts == at_attempts)
            .values(**values).returning(Segment.id))


# The API: retry, re-render, replan (each under its job's own transition).

def retried(job_id: uuid.UUID) -> Update:
    """failed or pending → pending with fresh attempts, nobody's, dispatched (a failed job
    retried: the API sends them at once, outside the fair order). Returns their ids."""
    return (update(Segment)
            .where(Segment.job_id == job_id, Segment.status.in_([FAILED, PENDING]))
            .values(status=PENDING, attempts=0, error=None, worker=None, heartbeat_at=utcnow(),
                    dispatched_at=utcnow())
            .returning(Segment.id))


def rerendered(segment_id: uuid.UUID, overrides: dict[str, Any] | None) -> Update:
    """done → pending, nobody's, dispatched (the API sends it at once), with a re-render's
    changes (voice, seed, lexicon)."""
    return update(Segment).where(Segment.id == segment_id).values(
        status=PENDING, error=None, worker=None, overrides=overrides, dispatched_at=utcnow())


def removed(ids: Iterable[uuid.UUID]) -> Delete:
    """Segments a re-render's new text no longer has."""
    return delete(Segment).where(Segment.id.in_(list(ids)))


def moved_aside(segment_id: uuid.UUID, index: int) -> Update:
    """A segment renumbered to `index`, first to -index - 1: (job, index) pairs are unique at
    every row, so moves go through negative indexes (then `moved_back`)."""
    return update(Segment).where(Segment.id == segment_id).values(index=-index - 1)


def moved_back(job_id: uuid.UUID) -> Update:
    """The job's segments moved aside take their new indexes."""
    return update(Segment).where(Segment.job_id == job_id, Segment.index < 0) \
        .values(index=-Segment.index - 1)
