"""The reaper: re-enqueue work whose message was lost, so a killed worker loses nothing.

Every worker runs it on a timer; all it does is conditional, so several reapers at once are
harmless, and a segment that is re-enqueued twice is still claimed once.
- A segment `running` whose heartbeat is stale (its worker died) goes back to `pending` and
  is re-enqueued after a backoff that doubles with each attempt; once it has used up
  SEGMENT_MAX_ATTEMPTS (a segment that kills its worker every time), it fails, and so does
  its job, whose owner is told.
- Pending segments of a running job that nobody has touched for a while are re-enqueued
  (their messages may have been lost with a broker restart).
- A `queued` job that was never planned gets its plan again; a job whose segments are all
  done but that is not completed gets its assembly again.
- A completed job past its `expires_at` (RESULT_TTL_HOURS) loses its media and is marked
  deleted.
"""

import threading
from collections.abc import Callable
from datetime import timedelta

import structlog
from sqlalchemy import and_, select, update

from models import Job, JobStatus, Segment, SegmentStatus, utcnow
from models.db import session_scope
from models.transitions import transition
from storage import store_for

log = structlog.get_logger()
Enqueue = Callable[[str, str, str, float], None]  # task name, id, job's model, delay (s)
BACKOFF_CAP_SECONDS = 600.0


def backoff(attempts: int, base: float) -> float:
    """Return the delay before attempt `attempts + 1`: base, 2 x base, 4 x base... capped."""
    return float(min(base * 2 ** max(attempts - 1, 0), BACKOFF_CAP_SECONDS))


def reap(stale_seconds: float, enqueue: Enqueue, max_attempts: int = 3,
         backoff_seconds: float = 5.0) -> dict[str, int]:
    """Run one pass; return how many segments and jobs were re-enqueued or failed."""
    now = utcnow()
    stale = now - timedelta(seconds=stale_seconds)
    counts = {"segments_reset": 0, "segments_requeued": 0, "plans": 0, "assemblies": 0,
              "expired": 0, "jobs_failed": 0}
    lost = (Segment.status == SegmentStatus.running) & (Segment.heartbeat_at < stale)
    with session_scope() as session:
        exhausted = session.execute(
            update(Segment).where(lost, Segment.attempts >= max_attempts)
            .values(status=SegmentStatus.failed, heartbeat_at=now,
                    error=f"worker lost while running, {max_attempts} times")
            .returning(Segment.id, Segment.job_id)).all()
        failed_jobs = []
        for segment_id, job_id in exhausted:
            session.execute(update(Job).where(Job.id == job_id)
                            .values(segments_failed=Job.segments_failed + 1))
            if transition(session, job_id, [JobStatus.in_progress], JobStatus.failed,
                          detail={"segment_id": str(segment_id)}, completed_at=now,
                          error={"code": "segment_failed", "message": "a segment's worker "
                                 f"was lost {max_attempts} times"}) is not None:
                failed_jobs.append(job_id)
        counts["jobs_failed"] = len(failed_jobs)
        reset_rows = session.execute(
            update(Segment).where(lost)
            .values(status=SegmentStatus.pending, heartbeat_at=now,
                    error="worker lost while running; re-enqueued by the reaper")
            .returning(Segment.id, Segment.attempts)).all()
        reset = [segment_id for segment_id, _ in reset_rows]
        counts["segments_reset"] = len(reset)
        # Pending segments untouched since before `stale` (heartbeat is set when re-enqueued).
        forgotten = session.execute(
            select(Segment.id, Job.model).join(Job, Job.id == Segment.job_id)
            .where(Segment.status == SegmentStatus.pending,
                   Job.status == JobStatus.in_progress, Job.updated_at < stale,
                   (Segment.heartbeat_at.is_(None)) | (Segment.heartbeat_at < stale))
            .limit(10_000)).all()
        if forgotten:
            session.execute(update(Segment).where(Segment.id.in_([s for s, _ in forgotten]))
                            .values(heartbeat_at=now))
        unplanned = session.scalars(select(Job.id).where(
            Job.status == JobStatus.queued, Job.created_at < stale,
            Job.updated_at < stale)).all()
        if unplanned:
            session.execute(update(Job).where(Job.id.in_(unplanned)).values(updated_at=now))
        unassembled = session.execute(select(Job.id).where(
            Job.status == JobStatus.in_progress, Job.updated_at < stale,
            and_(Job.segments_total > 0, Job.segments_done >= Job.segments_total))
        ).scalars().all()
        if unassembled:
            session.execute(update(Job).where(Job.id.in_(unassembled)).values(updated_at=now))
        expired = session.execute(
            update(Job).where(Job.expires_at < now, Job.deleted_at.is_(None))
            .values(deleted_at=now).returning(Job.id, Job.output_url)).all()
        models = dict(session.execute(select(Segment.id, Job.model).join(
            Job, Job.id == Segment.job_id).where(Segment.id.in_(reset))).all()) if reset else {}
    for segment_id, attempts in reset_rows:
        enqueue("narrator.synthesize", str(segment_id), models.get(segment_id, ""),
                backoff(attempts, backoff_seconds))
    for segment_id, model in forgotten:
        enqueue("narrator.synthesize", str(segment_id), model, 0.0)
    for job_id in unplanned:
        enqueue("narrator.plan", str(job_id), "", 0.0)
    for job_id in unassembled:
        enqueue("narrator.assemble", str(job_id), "", 0.0)
    for job_id in failed_jobs:
        enqueue("narrator.notify", str(job_id), "", 0.0)
    for job_id, output_url in expired:  # past RESULT_TTL_HOURS: the media goes
        for store in {store_for(), store_for(output_url) if output_url else store_for()}:
            store.delete(f"jobs/{job_id}")
    counts |= {"segments_requeued": len(forgotten), "plans": len(unplanned),
               "assemblies": len(unassembled), "expired": len(expired)}
    if any(counts.values()):
        log.warning("reaper.requeued", **counts)
    return counts


def start(interval: float, stale_seconds: float, enqueue: Enqueue, max_attempts: int = 3,
          backoff_seconds: float = 5.0) -> threading.Event:
    """Run the reaper every `interval` seconds in a daemon thread; set the event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            try:
                reap(stale_seconds, enqueue, max_attempts, backoff_seconds)
            except Exception:  # a database blip must not kill the thread
                log.warning("reaper.failed", exc_info=True)

    threading.Thread(target=loop, name="reaper", daemon=True).start()
    return stop

