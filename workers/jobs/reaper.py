"""The reaper: re-enqueue work whose message was lost, so a killed worker loses nothing.

Every worker runs it on a timer; all it does is conditional, so several reapers at once are
harmless, and a segment that is re-enqueued twice is still claimed once.
- A segment `running` whose heartbeat is stale (its worker died) goes back to `pending` and
  is re-enqueued after a backoff that doubles with each attempt; once it has used up
  SEGMENT_MAX_ATTEMPTS (a segment that kills its worker every time), it fails, and so does
  its job, whose owner is told.
- Dispatched segments of a running job that nobody has touched for a while are re-enqueued
  (their messages may have been lost with a broker restart); those not yet dispatched wait
  for dispatch (workers/jobs/dispatch.py), which runs after every pass.
- A `queued` job that was never planned gets its plan again; a job whose segments are all
  done but that is not completed gets its assembly again.
- A completed job past its `expires_at` (RESULT_TTL_HOURS) loses its media and is marked
  deleted.
"""

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy import ColumnElement, and_, delete, select, update
from sqlalchemy.orm import Session

from core import metrics
from core.backoff import backoff
from core.keys import job_prefix, result_store
from core.queues import ASSEMBLE, NOTIFY, PLAN, SYNTHESIZE
from models import Job, JobStatus, Segment, SegmentStatus, WorkerBeat, utcnow
from models import segments as segment_state
from models.db import session_scope
from models.transitions import transition
from storage import store_for

log = structlog.get_logger()
Enqueue = Callable[[str, str, str, float], None]  # task name, id, job's model, delay (s)
Task = tuple[str, str, str, float]  # what a sweep asks to enqueue once the pass commits


@dataclass(frozen=True)
class Pass:
    """One reaper pass: its clock, and the settings its sweeps read."""

    now: datetime
    stale: datetime  # work untouched since then may have lost its message
    live_since: datetime  # a worker that has not beaten since then is dead
    max_attempts: int
    backoff_seconds: float

    @property
    def lost(self) -> ColumnElement[bool]:
        """Segments running that nobody beats for: a live worker refreshes the heartbeat of
        each segment it runs every WORKER_HEARTBEAT_SECONDS (workers.runtime.liveness)."""
        return segment_state.lost(self.live_since)


def fail_exhausted(session: Session, p: Pass) -> list[Task]:
    """Fail lost segments that used up their attempts, and their jobs (owners are told)."""
    exhausted = session.execute(
        segment_state.lost_for_good(p.live_since, p.max_attempts, p.now)).all()
    tasks: list[Task] = []
    for segment_id, job_id in exhausted:
        session.execute(update(Job).where(Job.id == job_id)
                        .values(segments_failed=Job.segments_failed + 1))
        if transition(session, job_id, [JobStatus.in_progress], JobStatus.failed,
                      detail={"segment_id": str(segment_id)}, completed_at=p.now,
                      error={"code": "segment_failed", "message": "a segment's worker "
                             f"was lost {p.max_attempts} times"}) is not None:
            tasks.append((NOTIFY, str(job_id), "", 0.0))
    return tasks


def reset_lost(session: Session, p: Pass) -> list[Task]:
    """Put the other lost segments back to pending, to run after a doubling backoff."""
    rows = session.execute(segment_state.lost_again(p.live_since, p.now)).all()
    models = _models(session, {job_id for *_, job_id in rows})
    # The first loss goes again at once; repeated ones back off (a segment that kills its
    # worker should not take down the next one straight away).
    return [(SYNTHESIZE, str(segment_id), models[job_id],
             0.0 if attempts <= 1 else backoff(attempts - 1, p.backoff_seconds))
            for segment_id, attempts, job_id in rows]


def requeue_orphans(session: Session, p: Pass) -> list[Task]:
    """Re-enqueue at once the pending segments whose message may have died with a worker.

    Those a dead worker dispatched (it may have died before sending them) or took off the
    broker (pipeline.reserve), and, because a worker can die between taking a message and
    saying so, every dispatched pending segment of the running jobs a dead worker worked on,
    whoever dispatched it: a duplicate message claims nothing. It runs before `reset_lost`,
    while the dead worker's running segments still carry its id.
    """
    live = select(WorkerBeat.id).where(WorkerBeat.heartbeat_at >= p.live_since)
    dead = select(WorkerBeat.id).where(WorkerBeat.heartbeat_at < p.live_since)
    touched = select(Segment.job_id).where(Segment.worker.in_(dead))
    running = select(Job.id).where(Job.status == JobStatus.in_progress)
    rows = session.execute(segment_state.orphans_freed(
        (Segment.worker.is_not(None) & Segment.worker.not_in(live))
        | (Segment.dispatched_at.is_not(None)
           & Segment.job_id.in_(touched) & Segment.job_id.in_(running)), p.now)).all()
    models = _models(session, {job_id for _, job_id in rows})
    return [(SYNTHESIZE, str(segment_id), models[job_id], 0.0) for segment_id, job_id in rows]


def forget_dead(session: Session, p: Pass) -> list[Task]:
    """Remove the rows of dead workers once their segments have been handed on."""
    session.execute(delete(WorkerBeat).where(WorkerBeat.heartbeat_at < p.live_since))
    return []


def requeue_forgotten(session: Session, p: Pass) -> list[Task]:
    """Re-enqueue pending segments of running jobs untouched since before `stale` (their
    messages may have gone with a broker restart; the heartbeat is set when re-enqueued)."""
    forgotten = session.execute(
        select(Segment.id, Job.model).join(Job, Job.id == Segment.job_id)
        .where(Segment.status == SegmentStatus.pending, Job.status == JobStatus.in_progress,
               Segment.dispatched_at.is_not(None),  # the others wait for dispatch
               Job.updated_at < p.stale,
               (Segment.heartbeat_at.is_(None)) | (Segment.heartbeat_at < p.stale))
        .limit(10_000)).all()
    if forgotten:
        session.execute(segment_state.requeued([s for s, _ in forgotten], p.now))
    return [(SYNTHESIZE, str(segment_id), model, 0.0) for segment_id, model in forgotten]


def plan_forgotten(session: Session, p: Pass) -> list[Task]:
    """Plan again the queued jobs that were never planned."""
    jobs = session.scalars(select(Job.id).where(
        Job.status == JobStatus.queued, Job.created_at < p.stale, Job.updated_at < p.stale)).all()
    if jobs:
        session.execute(update(Job).where(Job.id.in_(jobs)).values(updated_at=p.now))
    return [(PLAN, str(job_id), "", 0.0) for job_id in jobs]


def reassemble(session: Session, p: Pass) -> list[Task]:
    """Assemble again the jobs whose segments are all done but that did not complete."""
    jobs = session.scalars(select(Job.id).where(
        Job.status == JobStatus.in_progress, Job.updated_at < p.stale,
        and_(Job.segments_total > 0, Job.segments_done >= Job.segments_total))).all()
    if jobs:
        session.execute(update(Job).where(Job.id.in_(jobs)).values(updated_at=p.now))
    return [(ASSEMBLE, str(job_id), "", 0.0) for job_id in jobs]


def expire(session: Session, p: Pass) -> list[tuple[uuid.UUID, str | None]]:
    """Mark completed jobs past `expires_at` deleted; return them, for their media to go."""
    return [(job_id, output_url) for job_id, output_url in session.execute(
        update(Job).where(Job.expires_at < p.now, Job.deleted_at.is_(None))
        .values(deleted_at=p.now).returning(Job.id, Job.output_url)).all()]


def _models(session: Session, job_ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    if not job_ids:
        return {}
    return {job_id: model for job_id, model in
            session.execute(select(Job.id, Job.model).where(Job.id.in_(job_ids)))}


SWEEPS = {"jobs_failed": fail_exhausted, "segments_orphaned": requeue_orphans,
          "segments_reset": reset_lost, "dead": forget_dead,
          "segments_requeued": requeue_forgotten, "plans": plan_forgotten, "assemblies": reassemble}


def reap(stale_seconds: float, enqueue: Enqueue, max_attempts: int = 3,
         backoff_seconds: float = 5.0, dead_seconds: float = 20.0) -> dict[str, int]:
    """Run one pass of every sweep; enqueue what they found once it has committed.

    Returns how many each sweep found (and how many jobs expired).
    """
    now = utcnow()
    p = Pass(now, now - timedelta(seconds=stale_seconds), now - timedelta(seconds=dead_seconds),
             max_attempts, backoff_seconds)
    with session_scope() as session:
        found = {name: sweep(session, p) for name, sweep in SWEEPS.items()}
        expired = expire(session, p)
    for tasks in found.values():
        for task in tasks:
            enqueue(*task)
    for job_id, output_url in expired:  # past RESULT_TTL_HOURS: the media goes
        for store in {store_for(), result_store(output_url)}:
            store.delete(job_prefix(job_id))
    counts = {name: len(tasks) for name, tasks in found.items()} | {"expired": len(expired)}
    for name, count in counts.items():
        if count:
            metrics.reaper_actions.labels(name).inc(count)
    if any(counts.values()):
        log.warning("reaper.requeued", **counts)
    return counts


def start(interval: float, stale_seconds: float, enqueue: Enqueue, max_attempts: int = 3,
          backoff_seconds: float = 5.0, dead_seconds: float = 20.0,
          after: Callable[[], None] | None = None) -> threading.Event:
    """Run the reaper every `interval` seconds in a daemon thread, then `after` (dispatch);
    set the event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            try:
                reap(stale_seconds, enqueue, max_attempts, backoff_seconds, dead_seconds)
                if after is not None:
                    after()
            except Exception:  # a database blip must not kill the thread
                log.warning("reaper.failed", exc_info=True)

    threading.Thread(target=loop, name="reaper", daemon=True).start()
    return stop

