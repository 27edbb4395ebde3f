"""Progressive assembly: each MP3 or m4b fragment encoded as soon as its segments are done.

A GPU worker that finishes a segment asks `fragment_ready`; if the segment completed a
fragment (workers/book/fragments.py), a CPU worker runs `encode_fragment` from the assembly
queue while the GPU goes on with the rest of the book. The assembly joins what was kept and
encodes the rest, so this is only ever a head start.
"""

import uuid

import soundfile as sf
import structlog
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from core.audio import Audio
from core.keys import part_key
from models import Job, JobStatus, Segment, SegmentStatus
from models.db import session_scope
from models.fragments import record as record_fragment
from storage import store_for
from workers.book import assembly, fragments, parts
from workers.book.timeline import cuts_after
from workers.settings import get_settings

log = structlog.get_logger()

# How far around a finished segment to look for the cuts that bound its fragment. With
# the default silences every segment is a fragment of its own; a longer run without a cut is
# left to the assembly.
FRAGMENT_WINDOW = 32


def fragment_ready(segment_id: uuid.UUID) -> tuple[uuid.UUID, int] | None:
    """Return (job, first index) of the fragment whose last missing part this segment
    was, so that a CPU worker can encode it while the rest of the book is synthesised."""
    with session_scope() as session:
        found = session.execute(
            select(Segment.job_id, Segment.index, Job.segments_total)
            .join(Job, Job.id == Segment.job_id)
            .where(Segment.id == segment_id, Job.response_format.in_(fragments.FORMATS),
                   func.coalesce(Job.options["mastering"].as_string(), "") != "acx",
                   Job.status == JobStatus.in_progress)).first()
        if found is None:
            return None
        job_id, index, total = found
        rows = session.execute(
            select(Segment.index, Segment.chapter, Segment.pause_after, Segment.status)
            .where(Segment.job_id == job_id,
                   Segment.index.between(index - FRAGMENT_WINDOW, index + FRAGMENT_WINDOW))
            .order_by(Segment.index)).all()
    at = {n: Segment(chapter=chapter, pause_after=pause) for n, chapter, pause, _ in rows}
    done = {n for n, _, _, status in rows if status == SegmentStatus.done}
    first = index
    while first > 0 and not cuts_after(at[first - 1], at[first]):
        first -= 1
        if first - 1 not in at and first > 0:
            return None  # no cut inside the window
    last = index
    while last < total - 1 and not cuts_after(at[last], at[last + 1]):
        last += 1
        if last + 1 not in at and last < total - 1:
            return None
    if any(n not in done for n in range(first, last + 1)):
        return None
    return job_id, first


def encode_fragment(job_id: uuid.UUID, first: int) -> bool:
    """Encode and keep the MP3 or AAC fragment that starts at segment `first`; True if it did.

    Idempotent, and only a head start: the assembly encodes whatever fragment is missing.
    """
    settings = get_settings()
    with session_scope() as session:
        job = session.get(Job, job_id, options=[defer(Job.chapters, raiseload=True)])
        if job is None or job.status != JobStatus.in_progress \
                or job.response_format not in fragments.FORMATS:
            return False
        fmt = job.response_format
        rows = list(session.scalars(
            select(Segment).where(Segment.job_id == job_id,
                                  Segment.index.between(first, first + FRAGMENT_WINDOW + 1))
            .order_by(Segment.index)).all())
        session.expunge_all()
    group = rows[:1]
    while len(group) < len(rows) and not cuts_after(group[-1], rows[len(group)]):
        group.append(rows[len(group)])
    following = rows[len(group)] if len(group) < len(rows) else None
    if not group or group[0].index != first or len(group) > FRAGMENT_WINDOW \
            or (following is None and group[-1].index != job.segments_total - 1) \
            or any(s.status != SegmentStatus.done for s in group):
        return False
    store = store_for()
    with store.open(part_key(job_id, first)) as f:
        rate = sf.info(f).samplerate
    key = fragments.group_key(job_id, group, following, settings.loudness_lufs,
                              rate, fmt)
    if assembly.kept_fragment(store, key) is not None:
        return False

    def finished(segment: Segment) -> Audio:
        return parts.finish(segment, store, lambda s: part_key(job_id, s.index),
                               settings.loudness_lufs, rate)

    encoded = fragments.encode_group(group, following, finished, rate, fmt)
    assembly.keep_fragment(store, key, encoded)
    with session_scope() as session:  # the live stream plays it from now on
        record_fragment(session, job_id, first, group[-1].index, group[0].chapter, key,
                        fragments.decoded_samples(encoded.book, rate, fmt), rate)
    log.info("fragment.encoded", job_id=str(job_id), first=first, segments=len(group))
    return True
