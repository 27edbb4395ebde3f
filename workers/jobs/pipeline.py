"""The long-job pipeline as plain functions over ids: plan, synthesize, assemble.

Tasks call these and enqueue whatever they return only after the session has committed.
Every function re-reads its rows and is safe to run twice.
"""

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, defer

from core import keys, metrics
from core.cast import voice_for
from core.keys import job_prefix, part_key, parts_prefix, result_store
from core.lexicon import reader_for
from core.registry import worker_id
from core.text import Gaps, IncompletePlan, Piece, check_plan, plan_pieces
from models import Job, JobStatus, Segment, SegmentStatus, utcnow, uuid7
from models import segments as segment_state
from models.db import session_scope
from models.fragments import replace as replace_fragments
from models.transitions import transition
from storage import store_for
from workers.book import alignment, assembly, parts
from workers.engines import Engine, SpeechRequest
from workers.jobs import quality, retakes
from workers.jobs.retakes import Assembled
from workers.runtime.engine import get_engine
from workers.runtime.liveness import holding
from workers.settings import get_settings

log = structlog.get_logger()


def plan(job_id: uuid.UUID) -> tuple[str, list[uuid.UUID]]:
    """Split a queued job into segments; return its model and the segments to synthesise."""
    settings = get_settings()
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            return "", []
        if job.status == JobStatus.queued:
            gaps = Gaps(settings.sentence_gap_seconds, settings.paragraph_gap_seconds,
                        settings.chapter_gap_seconds)
            language = (job.options.get("language") or "en")[:2]
            texts = [chapter["input"] for chapter in job.chapters]
            pieces = list(plan_pieces(texts, settings.segment_chars, gaps, language))
            try:
                check_plan(texts, pieces)
            except IncompletePlan as exc:  # never planned short: the job fails, nothing stored
                log.error("job.plan_incomplete", job_id=str(job_id), error=str(exc))
                transition(session, job_id, [JobStatus.queued], JobStatus.failed,
                           completed_at=utcnow(),
                           error={"code": "plan_incomplete",
                                  "message": f"planning lost part of the text: {exc}"})
                return job.model, []
            rows = [
                {"id": uuid7(), "job_id": job_id, "index": n, "chapter": piece.chapter,
                 "text": piece.text, "pause_after": piece.pause_after,
                 "speaker": piece.speaker}
                for n, piece in enumerate(pieces)
            ]
            if not rows:
                transition(session, job_id, [JobStatus.queued], JobStatus.failed,
                           completed_at=utcnow(),
                           error={"code": "empty_input", "message": "the text has nothing to "
                                  "speak once split into sentences"})
                return job.model, []
            session.execute(insert(Segment), rows)
            transition(session, job_id, [JobStatus.queued], JobStatus.in_progress,
                       detail={"segments": len(rows)}, started_at=utcnow(),
                       segments_total=len(rows))
            log.info("job.planned", job_id=str(job_id), segments=len(rows))
        elif job.status != JobStatus.in_progress:
            return job.model, []
        pending = session.scalars(
            select(Segment.id).where(Segment.job_id == job_id,
                                     Segment.status == SegmentStatus.pending)
            .order_by(Segment.index)
        ).all()
        if not pending and job.segments_done >= job.segments_total:
            return job.model, [job_id]  # nothing to synthesise: the caller assembles
    return job.model, list(pending)


def reserve(segment_id: uuid.UUID) -> None:
    """Mark a pending segment as taken off the broker by this worker.

    A worker that dies between taking a message and claiming its segment leaves no running
    row behind, and a broker hands such a message back late or never (Redis after its
    visibility timeout, the embedded broker never): the reaper hands on the pending
    segments of dead workers too.
    """
    with session_scope() as session:
        session.execute(segment_state.reserved(segment_id, worker_id()))


def hand_back() -> list[tuple[uuid.UUID, str]]:
    """Give back every segment this worker holds, running or only taken off the broker.

    For a worker stopping before it could finish them: they go back to pending at once (a
    running one gets back the attempt it spent: a deploy is not the segment's fault), and
    their own runs can no longer complete them (`done` needs this worker's claim). Returns
    (segment id, model) pairs to enqueue again.
    """
    with session_scope() as session:
        rows = session.execute(segment_state.handed_back(worker_id())).all()
        jobs = {job_id for _, job_id in rows}
        models = dict(session.execute(select(Job.id, Job.model).where(Job.id.in_(jobs))).all()) \
            if jobs else {}
    return [(segment_id, models[job_id]) for segment_id, job_id in rows]


@dataclass(frozen=True)
class Synthesized:
    """A segment this worker finished: its job, whether it was the job's last, and whether
    the job has its segments checked, aligned or heard back (read with the job, so the task
    asks nothing more)."""

    job_id: uuid.UUID
    last: bool
    checked: bool


@dataclass
class _Claim:
    """A segment this worker claimed: what to say, and what its job wants done with it."""

    job_id: uuid.UUID
    index: int
    attempt: int
    request: SpeechRequest
    rate: float  # the job's seconds per character, for the length guard
    verify: dict[str, Any] | None  # the recognition check's record so far
    checked: bool  # the job's segments are aligned or heard after they are spoken
    aligns: bool
    hears: bool


def _claim(segment_id: uuid.UUID, engine: Engine) -> _Claim | None:
    """Claim a segment for this worker and build its request; None if another has it."""
    settings = get_settings()
    with session_scope() as session:
        claimed = session.execute(segment_state.claimed(
            segment_id, worker_id(), Segment.job_id, Segment.index, Segment.text,
            Segment.quality, Segment.chapter, Segment.speaker, Segment.overrides,
            Segment.attempts)).first()
        if claimed is None:
            return None
        job_id, index, text, earlier, chapter, speaker, changed, attempt = claimed
        structlog.contextvars.bind_contextvars(job_id=str(job_id), segment=index)
        # Not the book's text: only the planner reads it.
        job = session.get(Job, job_id, options=[defer(Job.chapters, raiseload=True)])
        assert job is not None
        options = job.options | (changed or {})  # a re-render's voice, seed and lexicon
        request = SpeechRequest(
            text=reader_for(options, settings.normalize_text)(text),
            voice=voice_for(job.options, job.voice, chapter, speaker, changed),
            speed=job.speed,
            instructions=job.options.get("instructions"), language=job.options.get("language"),
            seed=alignment.take_seed(options.get("seed"), earlier),
            max_new_tokens=job.options.get("max_new_tokens"),
            task_type=job.options.get("task_type"), request_id=f"{job_id}-{index}",
        )
        return _Claim(
            job_id, index, attempt, request,
            quality.seconds_per_char(engine.info.engine, job.audio_seconds, job.chars_done,
                                     job.speed),
            alignment.verify_record(job, earlier, engine.info.engine),
            alignment.checked(job), alignment.wanted(job), alignment.verifies(job))


def synthesize(segment_id: uuid.UUID, engine: Engine | None = None) -> Synthesized | None:
    """Claim and synthesise one segment; None if this worker did not finish it."""
    engine = engine or get_engine()
    claim = _claim(segment_id, engine)
    if claim is None:
        return None
    job_id, index, checked = claim.job_id, claim.index, claim.checked
    with holding(segment_id):  # its heartbeat stays fresh while this worker works on it
        started = time.monotonic()
        audio, words, runs, flag = quality.guarded(engine, claim.request, claim.rate,
                                                   get_settings().quality_retries,
                                                   timed=claim.aligns)
        synthesized = time.monotonic()
        store = store_for()
        store.put(part_key(job_id, index), parts.part_bytes(audio, engine.sample_rate))
        if words is not None:  # placed as it spoke: no alignment to run for this part
            store.put(keys.words_key(job_id, index, claim.attempt + runs - 1, len(audio)),
                      alignment.words_bytes(words))
            checked = claim.hears
        written = time.monotonic()
    seconds = len(audio) / engine.sample_rate
    recorded = (flag or {}) | ({"verify": claim.verify} if claim.verify else {})
    with session_scope() as session:
        finished = session.execute(segment_state.finished(
            segment_id, worker_id(), len(audio), seconds, recorded or None, runs - 1)).first()
        if finished is None:
            drop_if_deleted(job_id)
            return None
        done, total, status, deleted = session.execute(
            update(Job).where(Job.id == job_id)
            .values(segments_done=Job.segments_done + 1,
                    chars_done=Job.chars_done + len(claim.request.text),  # the guard's unit
                    audio_seconds=Job.audio_seconds + seconds, updated_at=utcnow())
            .returning(Job.segments_done, Job.segments_total, Job.status, Job.deleted_at)
        ).one()
    if deleted is not None:  # deleted while it was spoken: its part goes too
        _drop(job_id)
        return None
    metrics.segments.labels(engine.info.id).inc()
    # Where a segment's time went: the engine (queueing in it included), writing the part,
    # and the bookkeeping after it; bench.gpu_product reads these from the worker's log.
    log.info("segment.done", seconds=round(seconds, 3), engine_s=round(synthesized - started, 3),
             write_s=round(written - synthesized, 3), db_s=round(time.monotonic() - written, 3))
    return Synthesized(job_id, done >= total and status == JobStatus.in_progress, checked)


def release(segment_id: uuid.UUID, error: str, max_attempts: int) -> bool:
    """Put a failed segment back to pending; past the budget, fail it and its job.

    Returns True when the segment may be retried.
    """
    with session_scope() as session:
        row = session.execute(
            select(Segment.job_id, Segment.attempts).where(Segment.id == segment_id)
        ).first()
        if row is None:
            return False
        job_id, attempts = row
        retry = attempts < max_attempts
        session.execute(segment_state.released(segment_id, worker_id(), retry, error))
        if not retry:
            session.execute(update(Job).where(Job.id == job_id)
                            .values(segments_failed=Job.segments_failed + 1))
            transition(session, job_id, [JobStatus.in_progress], JobStatus.failed,
                       detail={"segment_id": str(segment_id)}, completed_at=utcnow(),
                       error={"code": "segment_failed",
                              "message": f"a segment failed {attempts} times: {error[:500]}"})
    return retry


def fail_assembly(job_id: uuid.UUID, error: str, attempts: int) -> bool:
    """Fail a job whose assembly could not reach storage `attempts` times; True if it did."""
    with session_scope() as session:
        return transition(session, job_id, [JobStatus.in_progress], JobStatus.failed,
                          completed_at=utcnow(), error={
                              "code": "assembly_failed",
                              "message": f"storage was unreachable {attempts} times while "
                                         f"assembling the result: {error[:500]}"}) is not None


def drop_if_deleted(job_id: uuid.UUID | None) -> bool:
    """Remove a deleted job's media again; True if it was deleted.

    The API marks a job deleted, commits, then removes its media; a task that was already
    running writes after that (a part, a fragment, words, an assembly). Each such task calls
    this after its writes: whichever comes last, the API's removal or this one, nothing of
    the job stays.
    """
    if job_id is None:
        return False
    with session_scope() as session:
        deleted = session.scalar(select(Job.deleted_at).where(Job.id == job_id))
    if deleted is None:
        return False
    _drop(job_id)
    return True


def _drop(job_id: uuid.UUID) -> None:
    with session_scope() as session:
        output_url = session.scalar(select(Job.output_url).where(Job.id == job_id))
    for store in {store_for(), result_store(output_url)}:
        store.delete(job_prefix(job_id))
    log.info("job.late_writes_removed", job_id=str(job_id))


def job_of(segment_id: uuid.UUID) -> uuid.UUID | None:
    """Return the job a segment belongs to."""
    with session_scope() as session:
        return session.scalar(select(Segment.job_id).where(Segment.id == segment_id))


def _fail(session: Session, job_id: uuid.UUID, code: str, message: str) -> bool:
    """Fail an in-progress job with a clear error; True if it moved."""
    log.error("job.failed", job_id=str(job_id), code=code, error=message)
    return transition(session, job_id, [JobStatus.in_progress], JobStatus.failed,
                      completed_at=utcnow(), error={"code": code, "message": message}) is not None


def _complete_plan(job: Job, segments: Sequence[Segment]) -> dict[str, int]:
    """Check that every planned segment is present and that they hold the job's text."""
    present = [s.index for s in segments]
    if present != list(range(job.segments_total)):
        raise IncompletePlan(f"{len(present)} of the {job.segments_total} planned segments "
                             "are present")
    return check_plan([c["input"] for c in job.chapters],
                      [Piece(s.chapter, s.text, s.pause_after) for s in segments])


def _synthesize_again(job: Job, lost: parts.PartLost, max_attempts: int) -> Assembled:
    """Put a done segment whose part was lost back to pending; fail the job past its budget."""
    segment = lost.segment
    with session_scope() as session:
        if segment.attempts >= max_attempts:
            failed = _fail(session, job.id, "part_lost",
                           f"{lost} (after {segment.attempts} attempts)")
            return Assembled("failed" if failed else "waiting")
        moved = session.execute(segment_state.part_lost(segment.id, str(lost))).first()
        if moved is None:
            return Assembled("waiting")
        session.execute(update(Job).where(Job.id == job.id).values(
            segments_done=Job.segments_done - 1,
            audio_seconds=Job.audio_seconds - (segment.duration_seconds or 0.0)))
    log.warning("segment.part_lost", job_id=str(job.id), segment=segment.index, error=str(lost))
    return Assembled("waiting", job.model, (segment.id,))


def _ready(job_id: uuid.UUID) -> tuple[Job, list[Segment], dict[str, Any]] | Assembled:
    """The job and its segments once every segment is done and they hold its text (and the
    text check's record); else what the assembly comes to now."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.in_progress:
            return Assembled("waiting")
        segments = session.scalars(
            select(Segment).where(Segment.job_id == job_id).order_by(Segment.index)
        ).all()
        if any(s.status != SegmentStatus.done for s in segments):
            return Assembled("waiting")
        try:
            text_check = _complete_plan(job, segments)
        except IncompletePlan as exc:
            failed = _fail(session, job_id, "incomplete_result",
                           f"the job cannot be assembled whole: {exc}")
            return Assembled("failed" if failed else "waiting")
        # Tell the reaper that assembly is under way (it re-enqueues stalled jobs only).
        session.execute(update(Job).where(Job.id == job_id).values(updated_at=utcnow()))
        session.expunge_all()
    return job, list(segments), text_check


def assemble(job_id: uuid.UUID) -> Assembled:
    """Stitch the parts into the final media and mark the job completed.

    A job is never completed short: a missing segment or segments that do not hold the
    job's text fail it (incomplete_result); a lost or damaged part is synthesised again.
    """
    settings = get_settings()
    ready = _ready(job_id)
    if isinstance(ready, Assembled):
        return ready
    job, segments, text_check = ready
    store = store_for()
    try:
        checked = alignment.checks_for(job, segments, store) \
            if alignment.checked(job) else None
        if checked is not None and alignment.retries(job):
            again = retakes.retake(job, segments, checked, store, settings.verify_wer_margin,
                                   settings.quality_retries)
            if again is not None:
                return again
        verified = alignment.verification(checked.wer, settings.verify_wer_margin) \
            if checked is not None and alignment.verifies(job) else None
        used: list[dict[str, Any]] = []
        result = assembly.assemble(job, segments, store, result_store(job.output_url),
                                   lambda s: part_key(job_id, s.index), settings.loudness_lufs,
                                   checks={"text": text_check},
                                   threads=settings.assembly_threads,
                                   words=checked.words_of
                                   if checked is not None and alignment.wanted(job) else None,
                                   normalized=settings.normalize_text,
                                   heard=(checked.wer, verified)
                                   if checked is not None and verified is not None else None,
                                   fragments_used=used)
    except parts.PartLost as lost:
        return _synthesize_again(job, lost, settings.segment_max_attempts)
    with session_scope() as session:
        now = utcnow()
        expires = now + timedelta(hours=settings.result_ttl_hours) \
            if settings.result_ttl_hours else None
        moved = transition(session, job_id, [JobStatus.in_progress], JobStatus.completed,
                           result=result, completed_at=now, expires_at=expires,
                           audio_seconds=result["duration_seconds"])
        if moved is not None:  # the stream plays the whole book, while its parts are kept
            replace_fragments(session, job_id, used if settings.keep_parts else [])
    if moved is None:
        return Assembled("waiting")
    if not settings.keep_parts:
        store.delete(parts_prefix(job_id))
    log.info("job.completed", job_id=str(job_id), seconds=result["duration_seconds"])
    return Assembled("completed")
