"""Word timings for finished segments: forced alignment on CPU workers, kept beside the parts.

When a segment of a job that asked for subtitles is done, `narrator.align_segment` goes to
the CPU workers' `assembly` queue (never the GPU worker: PocketSphinx holds the GIL while it
decodes, which would stall the engine's output loop). The words it finds are kept in
`parts/{n}-{attempt}-{samples}.words.json`, so the words of a part synthesised again are
never used. The assembly aligns the segments whose words are not kept by then (words_for),
and builds subtitle cues from them (workers.timeline.sentence_cues); a segment that does not
align keeps the estimate, and the manifest says which.
"""

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import soundfile as sf
import structlog
from sqlalchemy.orm import defer

from core.keys import part_key, parts_prefix
from core.normalize import spoken
from models import Job, JobStatus, Segment, SegmentStatus
from models.db import session_scope
from storage import MediaStore, store_for
from workers import assembly
from workers.aligners import Aligner, Word
from workers.aligners.pool import PooledAligner
from workers.assembly import cores
from workers.settings import get_settings

log = structlog.get_logger()

_POOL: list[PooledAligner] = []  # the process's one pool, made on first use
_POOL_LOCK = threading.Lock()


def _pooled() -> PooledAligner:
    """PocketSphinx in child processes: it holds the GIL while it decodes (aligners/pool.py)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(PooledAligner(get_settings().align_processes or max(1, cores() // 2)))
        return _POOL[0]


LANGUAGES = ("en",)  # what the CPU aligner's acoustic model and dictionary cover


def _wants(options: dict[str, Any] | None) -> bool:
    language = ((options or {}).get("language") or "en")[:2]
    return get_settings().align_words and bool((options or {}).get("subtitles")) \
        and language in LANGUAGES


def wanted(job: Job) -> bool:
    """Whether a job's segments are aligned: it asked for subtitles, in a language we align."""
    return _wants(job.options)


def words_key(job_id: uuid.UUID, segment: Segment) -> str:
    """Where a segment's words are kept: for this attempt and length of its part only."""
    return f"{parts_prefix(job_id)}/{segment.index:06d}-{segment.attempts}-{segment.samples}" \
        ".words.json"


def align_segment(segment_id: uuid.UUID, aligner: Aligner | None = None) -> bool:
    """Align one done segment's part with the text it speaks; keep the words. True if kept."""
    with session_scope() as session:
        segment = session.get(Segment, segment_id)
        if segment is None or segment.status != SegmentStatus.done:
            return False
        job = session.get(Job, segment.job_id, options=[defer(Job.chapters, raiseload=True)])
        if job is None or job.status != JobStatus.in_progress or not wanted(job):
            return False
        session.expunge_all()
    return _align_part(job, segment, store_for(), aligner or _pooled()) is not None


def _align_part(job: Job, segment: Segment, store: MediaStore,
                aligner: Aligner) -> list[Word] | None:
    """Align a segment's part, keep its words and return them (None: it did not align)."""
    with store.open(part_key(job.id, segment.index)) as f:
        rate = sf.info(f).samplerate
    audio = assembly.read_part(segment, store, lambda s: part_key(job.id, s.index))
    language = job.options.get("language")
    text = spoken(segment.text, language) if get_settings().normalize_text else segment.text
    words = aligner.align(audio, rate, text)
    if words is None:
        log.info("segment.align_failed", job_id=str(job.id), segment=segment.index)
        return None
    store.put(words_key(job.id, segment), json.dumps(
        [[w.word, w.start, w.end, w.estimated] for w in words]).encode())
    return words


def words_for(job: Job, segments: list[Segment], store: MediaStore,
              aligner: Aligner | None = None) -> Callable[[Segment], list[Word] | None]:
    """Each segment's words for its job's assembly: those kept, and the rest aligned now.

    The align tasks sent as segments finish may still be running when the last segment's
    assembly starts (or were never sent: no CPU worker ran), so without this the book's last
    segments would keep the estimate. The missing ones are aligned here, as many at once as
    the pool has processes; one that fails keeps the estimate.
    """
    kept = kept_words(store, job.id)
    found = {s.index: kept(s) for s in segments}
    missing = [s for s in segments if found[s.index] is None]
    if missing:
        aligner = aligner or _pooled()

        def align(segment: Segment) -> list[Word] | None:
            try:
                return _align_part(job, segment, store, aligner)
            except Exception:  # the estimate, as for a segment that did not align
                log.warning("segment.align_failed", job_id=str(job.id), segment=segment.index,
                            exc_info=True)
                return None

        with ThreadPoolExecutor(getattr(aligner, "processes", 1)) as pool:
            for segment, words in zip(missing, pool.map(align, missing), strict=True):
                found[segment.index] = words
        log.info("job.aligned_at_assembly", job_id=str(job.id), segments=len(missing))
    return lambda segment: found.get(segment.index)


def kept_words(store: MediaStore, job_id: uuid.UUID) -> Callable[[Segment], list[Word] | None]:
    """Return a lookup of each segment's kept words (None: none for this part)."""

    def lookup(segment: Segment) -> list[Word] | None:
        try:
            with store.open(words_key(job_id, segment)) as f:
                rows = json.loads(f.read())
        except FileNotFoundError:
            return None
        return [Word(word, start, end, estimated) for word, start, end, estimated in rows]

    return lookup
