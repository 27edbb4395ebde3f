"""`verify: "retry"` at assembly: misheard segments spoken again, the best take kept.

Once every segment has been heard back, segments far above the job's median word error
rate go back to the GPU workers with a new seed (their current part kept aside as a take);
when none is left to retake, a segment whose earlier take was heard better than its last
gets that take back.
"""

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import update

from core.keys import part_key, take_key
from models import Job, Segment
from models import segments as segment_state
from models.db import session_scope
from storage import MediaStore
from workers.book import alignment

log = structlog.get_logger()


@dataclass(frozen=True)
class Assembled:
    """What an assembly did: completed, failed or waiting, and segments to synthesise again."""

    outcome: str
    model: str = ""
    again: tuple[uuid.UUID, ...] = ()


def _take_of(segment: Segment, wer: float | None) -> dict[str, Any]:
    """Describe a segment's current part as a take (`verify: "retry"`)."""
    return {"attempts": segment.attempts, "samples": segment.samples,
            "seconds": segment.duration_seconds, "wer": None if wer is None else round(wer, 4)}


def _with_takes(segment: Segment, earlier: list[dict[str, Any]],
                **more: Any) -> dict[str, Any]:
    quality = dict(segment.quality or {})
    quality["verify"] = dict(quality.get("verify") or {}) | {"takes": earlier} | more
    return quality


def retake(job: Job, segments: list[Segment], checked: alignment.Checks, store: MediaStore,
            margin: float, most: int) -> Assembled | None:
    """`verify: "retry"` at assembly, when every segment has been heard back.

    Segments far above the job's median word error rate (`alignment.verification`) are
    synthesised again with a new seed, up to `most` times each: the current part is kept
    aside as a take, and the segment goes back to pending (returned: the job waits for
    them). Once none is left to retake, a segment whose earlier take was heard better than
    its last one gets that take back (part, words, error rate), so the best take is kept.
    Returns None when the job can be assembled now.
    """
    verified = alignment.verification(checked.wer, margin)
    again = alignment.to_retake(segments, verified["flagged"], most)
    if again:
        moved = []
        with session_scope() as session:
            for segment in again:
                earlier = alignment.takes(segment.quality)
                take = len(earlier)
                store.put(take_key(job.id, segment.index, take),
                          store.get(part_key(job.id, segment.index)))
                record = _take_of(segment, checked.wer.get(segment.index))
                if session.execute(segment_state.retaken(
                        segment.id, segment.attempts,
                        _with_takes(segment, [*earlier, record]))).first() is None:
                    continue
                session.execute(update(Job).where(Job.id == job.id).values(
                    segments_done=Job.segments_done - 1,
                    audio_seconds=Job.audio_seconds - (segment.duration_seconds or 0.0)))
                moved.append(segment.id)
                log.warning("segment.retake", job_id=str(job.id), segment=segment.index,
                            take=take + 1, wer=record["wer"],
                            threshold=verified["threshold"])
        return Assembled("waiting", job.model, tuple(moved))
    for n, segment in enumerate(segments):
        earlier = alignment.takes(segment.quality)
        best = alignment.best_take(checked.wer.get(segment.index), earlier)
        if best is not None:
            segments[n] = _restore(job, segment, earlier, best, checked, store)
    return None


def _restore(job: Job, segment: Segment, earlier: list[dict[str, Any]], best: int,
             checked: alignment.Checks, store: MediaStore) -> Segment:
    """Put an earlier take back as a segment's part: its audio, samples, words and error
    rate, under a new attempt count (MP3 fragments and checks are named by it)."""
    take = earlier[best]
    restored = Segment(**{c: getattr(segment, c) for c in (
        "id", "job_id", "index", "chapter", "text", "pause_after", "status", "worker",
        "heartbeat_at", "error")})
    restored.attempts = segment.attempts + 1
    restored.samples, restored.duration_seconds = take["samples"], take["seconds"]
    restored.quality = _with_takes(segment, [*earlier, _take_of(
        segment, checked.wer.get(segment.index))], kept=best)
    store.put(part_key(job.id, segment.index), store.get(take_key(job.id, segment.index, best)))
    then = Segment(attempts=take["attempts"], samples=take["samples"], index=segment.index)
    for key in (alignment.words_key, alignment.heard_key):
        with contextlib.suppress(FileNotFoundError):
            store.put(key(job.id, restored), store.get(key(job.id, then)))
    with session_scope() as session:  # once, if two assemblies run (the other sees it done)
        if session.execute(segment_state.take_restored(
                segment.id, segment.attempts, attempts=restored.attempts,
                samples=restored.samples, duration_seconds=restored.duration_seconds,
                quality=restored.quality)).first() is not None:
            session.execute(update(Job).where(Job.id == job.id).values(
                audio_seconds=Job.audio_seconds + (take["seconds"] or 0.0)
                - (segment.duration_seconds or 0.0)))
    checked.wer[segment.index] = take["wer"]
    if segment.index in checked.words:
        checked.words[segment.index] = alignment.kept_words(store, job.id)(restored)
    log.info("segment.take_kept", job_id=str(job.id), segment=segment.index, take=best + 1,
             wer=take["wer"])
    return restored
