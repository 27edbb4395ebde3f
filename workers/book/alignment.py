"""Word timings for finished segments: forced alignment on CPU workers, kept beside the parts.

When a segment of a job that asked for subtitles is done, `narrator.align_segment` goes to
the CPU workers' `assembly` queue (never the GPU worker: PocketSphinx holds the GIL while it
decodes, which would stall the engine's output loop). The words it finds are kept in
`parts/{n}-{attempt}-{samples}.words.json`, so the words of a part synthesised again are
never used. The assembly checks the segments not checked by then (checks_for),
and builds subtitle cues from them (workers.book.timeline.sentence_cues); a segment that does not
align keeps the estimate, and the manifest says which.
"""

import json
import statistics
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import soundfile as sf
import structlog
from sqlalchemy.orm import defer

from core import keys
from core.catalog import ALIGNER_LANGUAGES, RECOGNIZER_LANGUAGES
from core.hearing import word_error_rate
from core.keys import part_key
from core.lexicon import reader_for
from models import Job, JobStatus, Segment, SegmentStatus
from models.db import session_scope
from storage import MediaStore, store_for
from workers.aligners import Aligner, Word, placed, words_of
from workers.aligners.pool import PooledAligner
from workers.book import parts
from workers.settings import cores, get_settings

if TYPE_CHECKING:
    from workers.aligners import Recognizer

log = structlog.get_logger()

_POOL: list[Any] = []  # the process's one checker, made on first use
_POOL_LOCK = threading.Lock()


class _OnGpu:
    """A checker with a GPU model for aligning (ALIGNER=qwen3), hearing (RECOGNIZER=qwen3)
    or both; PocketSphinx's pool does the other."""

    def __init__(self, aligner: Aligner, recognizer: "Recognizer", batch: int) -> None:
        self.align, self.transcribe = aligner.align, recognizer.transcribe
        self.heard_spans = getattr(recognizer, "heard_spans", True)
        self.processes = batch  # the GPU's batch: what the assembly checks at once


def _pooled() -> Any:
    """The process's checker: PocketSphinx in child processes (it holds the GIL while it
    decodes, aligners/pool.py), with the GPU aligner or recogniser the settings name."""
    with _POOL_LOCK:
        if not _POOL:
            settings = get_settings()
            pool = PooledAligner(settings.align_processes or max(1, cores() // 2))
            aligner: Any = pool
            recognizer: Any = pool
            if settings.aligner == "qwen3":
                from workers.aligners.qwen3 import Qwen3Aligner

                aligner = Qwen3Aligner(settings.aligner_model,
                                       memory=settings.aligner_gpu_memory,
                                       batch=settings.aligner_batch)
            if settings.recognizer == "qwen3":
                from workers.aligners.qwen3_asr import Qwen3Recognizer

                recognizer = Qwen3Recognizer(settings.recognizer_model,
                                             memory=settings.recognizer_gpu_memory,
                                             batch=settings.recognizer_batch)
            if aligner is not pool and recognizer is not pool:
                # Qwen3-ASR first: vLLM runs its engine core in a process of its own, and the
                # aligner, loaded next, sets in-process engines for what follows (as vLLM-Omni
                # runs it). In this order both ran in one process on an H100; two in-process
                # engines in one process were not tried.
                recognizer.start()
            gpu = [m.processes for m in (aligner, recognizer) if m is not pool]
            _POOL.append(_OnGpu(aligner, recognizer, max(gpu)) if gpu else pool)
        return _POOL[0]


def _language(options: dict[str, Any] | None) -> str:
    return ((options or {}).get("language") or "en")[:2].lower()


def _heard(options: dict[str, Any] | None) -> bool:
    return _language(options) in RECOGNIZER_LANGUAGES[get_settings().recognizer]


def _wants(options: dict[str, Any] | None) -> bool:
    settings = get_settings()
    return settings.align_words and bool((options or {}).get("subtitles")) \
        and _language(options) in ALIGNER_LANGUAGES[settings.aligner]


def wanted(job: Job) -> bool:
    """Whether a job's segments are aligned: it asked for subtitles, in a language we align."""
    return _wants(job.options)


def verifies(job: Job) -> bool:
    """Whether a job's segments are heard back (the recognition check, `verify`)."""
    return (job.options.get("verify") or "off") != "off" and _heard(job.options)


def retries(job: Job) -> bool:
    """Whether a job's misheard segments are synthesised again (`verify: "retry"`)."""
    return job.options.get("verify") == "retry" and verifies(job)


# Engines that say the same words on every take: Piper's and Kokoro's takes differ only in
# their noise, so a misheard segment of theirs is flagged, never synthesised again.
SAME_WORDS_EVERY_TAKE = ("piper", "kokoro")
RETAKE_SEED = 7919  # seed step between takes (the length guard's own retries add 1, 2, ...)


def takes(quality: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Return a segment's earlier takes (`verify: "retry"`), oldest first."""
    return list(((quality or {}).get("verify") or {}).get("takes") or [])


def take_seed(seed: int | None, quality: dict[str, Any] | None) -> int | None:
    """Return the seed of a segment's next take: the job's, or a new one for a retake."""
    count = len(takes(quality))
    return (seed or 0) + RETAKE_SEED * count if count else seed


def verify_record(job: Job, quality: dict[str, Any] | None,
                  engine: str) -> dict[str, Any] | None:
    """Return the `verify` entry a segment's quality keeps across its takes: its earlier
    takes, and `retakes: false` where its engine says the same words every take."""
    if not retries(job):
        return None
    record = dict((quality or {}).get("verify") or {})
    if engine in SAME_WORDS_EVERY_TAKE:
        record["retakes"] = False
    return record or None


def best_take(current: float | None, earlier: list[dict[str, Any]]) -> int | None:
    """Return the earlier take to keep instead of the current part (None: keep the current):
    the lowest word error rate wins, the later take on a tie."""
    rated = [(t["wer"], -n) for n, t in enumerate(earlier) if t.get("wer") is not None]
    if current is None or not rated:
        return None
    wer, minus = min(rated)
    return -minus if wer < current else None


def to_retake(segments: list[Segment], flagged: list[int], most: int) -> list[Segment]:
    """Return the flagged segments to synthesise again: those whose engine can say other
    words and that have had fewer than `most` retakes."""
    marked = set(flagged)
    return [s for s in segments if s.index in marked and len(takes(s.quality)) < most
            and ((s.quality or {}).get("verify") or {}).get("retakes", True)]


def checked(job: Job) -> bool:
    """Whether a job's finished segments go to the CPU workers for a check of either kind."""
    return wanted(job) or verifies(job)


def words_key(job_id: uuid.UUID, segment: Segment) -> str:
    """Where a segment's words are kept: for this attempt and length of its part only."""
    return keys.words_key(job_id, segment.index, segment.attempts, segment.samples)


def words_bytes(words: list[Word]) -> bytes:
    """Serialise words as they are kept (kept_words reads them)."""
    return json.dumps([[w.word, w.start, w.end, w.estimated] for w in words]).encode()


def heard_key(job_id: uuid.UUID, segment: Segment) -> str:
    """Where what the recogniser heard in a segment's part is kept (as words_key)."""
    return keys.heard_key(job_id, segment.index, segment.attempts, segment.samples)


def align_segment(segment_id: uuid.UUID, aligner: Aligner | None = None) -> bool:
    """Check one done segment's part: align it with the text it speaks (subtitles) and hear
    it back (`verify`), keeping what each finds. True if anything was kept."""
    with session_scope() as session:
        segment = session.get(Segment, segment_id)
        if segment is None or segment.status != SegmentStatus.done:
            return False
        job = session.get(Job, segment.job_id, options=[defer(Job.chapters, raiseload=True)])
        if job is None or job.status != JobStatus.in_progress or not checked(job):
            return False
        session.expunge_all()
    store = store_for()
    # A part whose engine placed its words as it spoke (Piper) is only heard, if at all.
    align = wanted(job) and kept_words(store, job.id)(segment) is None
    if not align and not verifies(job):
        return False
    words, wer = _check_part(job, segment, store, aligner or _pooled(),
                             align=align, hear=verifies(job))
    return words is not None or wer is not None


def _check_part(job: Job, segment: Segment, store: MediaStore, checker: Any, *, align: bool,
                hear: bool) -> tuple[list[Word] | None, float | None]:
    """Align and/or hear a segment's part and keep what was found: (words, error rate)."""
    with store.open(part_key(job.id, segment.index)) as f:
        rate = sf.info(f).samplerate
    audio = parts.read_part(segment, store, lambda s: part_key(job.id, s.index))
    text = reader_for(job.options | (segment.overrides or {}),
                      get_settings().normalize_text)(segment.text)
    words = wer = None
    # Heard first: where the recogniser heard the text's words in place, its spans place
    # them (aligners.placed) and the segment is decoded once, not twice.
    heard = checker.transcribe(audio, rate, text) if hear else None
    if align:
        if heard is not None and getattr(checker, "heard_spans", True):
            words = placed(words_of(text), heard, len(audio), rate)
        if words is None:
            words = checker.align(audio, rate, text)
        if words is None:
            log.info("segment.align_failed", job_id=str(job.id), segment=segment.index)
        else:
            store.put(words_key(job.id, segment), words_bytes(words))
    if heard is not None:
        said = [w.word for w in heard]
        wer = word_error_rate(words_of(text), said)
        store.put(heard_key(job.id, segment), json.dumps(
            {"heard": " ".join(said), "wer": wer}).encode())
    return words, wer


class Checks:
    """What the assembly uses of a job's segment checks: words and word error rates."""

    def __init__(self) -> None:
        self.words: dict[int, list[Word] | None] = {}
        self.wer: dict[int, float | None] = {}

    def words_of(self, segment: Segment) -> list[Word] | None:
        """Return a segment's aligned words (None: it has none)."""
        return self.words.get(segment.index)


def checks_for(job: Job, segments: list[Segment], store: MediaStore,
               checker: Any = None) -> Checks:
    """Each segment's checks for its job's assembly: those kept, and the rest done now.

    The tasks sent as segments finish may still be running when the last segment's assembly
    starts (or were never sent: no CPU worker ran), so without this the book's last segments
    would keep the estimate and go unheard. The missing ones are checked here, as many at once
    as the pool has processes; one that fails keeps the estimate (and is listed unchecked).
    """
    align, hear = wanted(job), verifies(job)
    found = Checks()
    kept = kept_words(store, job.id)
    for s in segments:
        if align:
            found.words[s.index] = kept(s)
        if hear:
            found.wer[s.index] = _kept_wer(store, job.id, s)
    missing = [s for s in segments if (align and found.words[s.index] is None)
               or (hear and found.wer[s.index] is None)]
    if not missing:
        return found
    checker = checker or _pooled()

    def check(segment: Segment) -> tuple[list[Word] | None, float | None]:
        try:
            return _check_part(job, segment, store, checker,
                               align=align and found.words[segment.index] is None,
                               hear=hear and found.wer[segment.index] is None)
        except Exception:  # the estimate, as for a segment that did not align
            log.warning("segment.check_failed", job_id=str(job.id), segment=segment.index,
                        exc_info=True)
            return None, None

    with ThreadPoolExecutor(getattr(checker, "processes", 1)) as pool:
        for segment, (words, wer) in zip(missing, pool.map(check, missing), strict=True):
            if words is not None:
                found.words[segment.index] = words
            if wer is not None:
                found.wer[segment.index] = wer
    log.info("job.checked_at_assembly", job_id=str(job.id), segments=len(missing))
    return found


def verification(wer: dict[int, float | None], margin: float) -> dict[str, Any]:
    """The job's recognition check: its median word error rate, the segments far above it
    (more than `margin` over the median: flagged), the worst five, and any unchecked."""
    rates = sorted(v for v in wer.values() if v is not None)
    median = statistics.median(rates) if rates else None
    threshold = None if median is None else round(median + margin, 4)
    flagged = [n for n, v in sorted(wer.items())
               if v is not None and threshold is not None and v > threshold]
    worst = sorted(((n, v) for n, v in wer.items() if v is not None), key=lambda p: -p[1])[:5]
    return {"median_wer": median, "threshold": threshold, "flagged": flagged,
            "worst": [{"index": n, "wer": round(v, 4)} for n, v in worst],
            "unchecked": [n for n, v in sorted(wer.items()) if v is None]}


def _kept_wer(store: MediaStore, job_id: uuid.UUID, segment: Segment) -> float | None:
    try:
        with store.open(heard_key(job_id, segment)) as f:
            return float(json.loads(f.read())["wer"])
    except FileNotFoundError:
        return None


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
