"""Assemble a job: stream parts in order with planned silences, encode, subtitle, manifest."""

import contextlib
import functools
import itertools
import json
import queue
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import structlog

from core import ids, keys
from core.audio import EXTENSIONS, Audio, Mark
from core.audio import encode_to as encode_blocks
from core.keys import version_prefix
from core.lexicon import reader_for
from core.marking import Provenance
from models import Job, Segment
from storage import MediaStore
from workers.book import fragments, mastering, parts
from workers.book.tags import TAGGED, Tags, book_tags
from workers.book.tags import write as write_tags
from workers.book.timeline import (
    Span,
    Timeline,
    Words,
    chapter_spans,
    cue_speakers,
    manifest,
    sentence_cues,
    subtitles,
    word_track,
)
from workers.provenance import mark_files, marking
from workers.settings import cores

log = structlog.get_logger()


class _Feed:
    """Blocks for one encoder thread: a bounded queue read until None (bounded memory)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Audio | None] = queue.Queue(maxsize=8)

    def __iter__(self) -> Iterator[Audio]:
        while (block := self.queue.get()) is not None:  # not iter(get, None): arrays and ==
            yield block

    def put(self, block: Audio | None, encoders: list[Future[None]]) -> None:
        """Queue a block; if an encoder has failed meanwhile, raise its error."""
        while True:
            try:
                self.queue.put(block, timeout=0.5)
                return
            except queue.Full:
                for encoder in encoders:
                    if encoder.done():
                        encoder.result()

    def close(self, encoder: Future[None]) -> None:
        """End the stream, unless its encoder has already stopped (it raised)."""
        while not encoder.done():
            try:
                self.queue.put(None, timeout=0.5)
                return
            except queue.Full:
                continue


def _encode(segments: list[Segment], blocks: Iterator[Audio], timeline: Timeline, fmt: str,
            main: Path, marks: list[tuple[str, float, float]],
            chapter_files: list[Path], master: bool = False) -> None:
    """Encode the whole book and, if `chapter_files`, each chapter, from one read of the parts.

    Two encoder threads (libsndfile and PyAV release the GIL) take the same finished blocks:
    one writes the book, the other the chapters in turn, each chapter with its inner silences.
    `master` (ACX, mastering.py): every silence is room tone, the book and each chapter file
    open and close with the timeline's lead and tail of it, and the MP3 is 44.1 kHz CBR.
    """
    rate, book = timeline.rate, _Feed()
    chapters = [_Feed() for _ in chapter_files]
    silence = mastering.RoomTone() if master else (lambda n: np.zeros(n, dtype=np.float32))
    out = functools.partial(encode_blocks, out_rate=mastering.RATE if master else None,
                            cbr_kbps=mastering.KBPS if master else None)

    def encode_chapters() -> None:
        for feed, path in zip(chapters, chapter_files, strict=True):
            out(feed, rate, fmt, path)

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="encode") as pool:
        encoders = [pool.submit(out, book, rate, fmt, main, marks)]
        if chapters:
            encoders.append(pool.submit(encode_chapters))
        chapter = 0
        try:
            if timeline.lead:
                book.put(silence(timeline.lead), encoders)
            for n, (segment, audio) in enumerate(zip(segments, blocks, strict=True)):
                last = n == len(segments) - 1
                book.put(audio, encoders)
                book.put(silence(timeline.after(n)), encoders)  # the last: the tail
                if chapters:
                    ends_chapter = last or segments[n + 1].chapter != segment.chapter
                    if timeline.lead and (n == 0 or segments[n - 1].chapter != segment.chapter):
                        chapters[chapter].put(silence(timeline.lead), encoders)
                    chapters[chapter].put(audio, encoders)
                    if ends_chapter:
                        chapters[chapter].put(silence(timeline.tail), encoders)
                        chapters[chapter].close(encoders[-1])
                        chapter += 1
                    else:
                        chapters[chapter].put(silence(timeline.after(n)), encoders)
        finally:  # on an error too: let the encoders finish, so the pool can close
            book.close(encoders[0])
            for feed in chapters[chapter:]:
                feed.close(encoders[-1])
        for encoder in encoders:
            encoder.result()


def _targets(segments: list[Segment], spans: list[Span], timeline: Timeline) -> dict[int, float]:
    """Each chapter's RMS target for its parts (mastering.target_db), its file being the
    chapter's span with the timeline's lead and tail of room tone."""
    speech = {span.number: 0 for span in spans}
    for segment in segments:
        speech[segment.chapter] += segment.samples or 0
    return {span.number: mastering.target_db(speech[span.number], span.end - span.start
                                             + timeline.lead + timeline.tail) for span in spans}


def _measured(spans: list[Span], files: list[Path]) -> dict[str, Any]:
    """Each chapter file measured against the ACX profile (mastering.measure)."""
    chapters = [{"title": span.title} | mastering.measure(path).report()
                for span, path in zip(spans, files, strict=False)]
    return {"profile": "acx", "ok": all(c["ok"] for c in chapters), "chapters": chapters}


def tags_of(job: Job, store: MediaStore) -> Tags:
    """Return the tags of a job's files: its `book`, its cover, its first heading."""
    cover = None
    if job.options.get("cover"):
        try:
            with store.open(job.options["cover"]) as f:
                cover = f.read()
        except FileNotFoundError:  # removed by hand: the book is still worth finishing
            log.warning("job.cover_missing", job_id=str(job.id), key=job.options["cover"])
    heading = next((c["title"] for c in job.chapters or [] if c.get("title")), None)
    return book_tags(job.options, job.voice, cover, heading)


def kept_fragment(store: MediaStore, key: str) -> fragments.Encoded | None:
    """Return a group's fragment encoded earlier (progressive.encode_fragment), if any."""
    try:
        with store.open(key) as f:
            book = f.read()
    except FileNotFoundError:
        return None
    try:
        with store.open(fragments.closing_key(key)) as f:
            return fragments.Encoded(book, f.read())
    except FileNotFoundError:
        return fragments.Encoded(book)


def keep_fragment(store: MediaStore, key: str, encoded: fragments.Encoded) -> None:
    """Store a group's fragment for the assembly (its closing variant first: the book's
    fragment is what says both are there)."""
    if encoded.closing is not None and encoded.closing is not encoded.book:
        store.put(fragments.closing_key(key), encoded.closing)
    store.put(key, encoded.book)


class KeptFragments:
    """A job's fragments in storage: each found if encoded earlier (progressive.py), and
    each the assembly used, kept there if it encoded it (for re-renders) and listed in
    `used` (for the live stream's record, models/fragments.py)."""

    def __init__(self, store: MediaStore, job_id: uuid.UUID, lufs: float, rate: int,
                 fmt: str) -> None:
        self._store, self._job, self._lufs, self._rate, self._fmt = \
            store, job_id, lufs, rate, fmt
        self._lock = threading.Lock()
        self.used: list[dict[str, Any]] = []

    def _key(self, group: list[Segment], following: Segment | None) -> str:
        return fragments.group_key(self._job, group, following, self._lufs, self._rate,
                                   self._fmt)

    def find(self, group: list[Segment], following: Segment | None
             ) -> fragments.Encoded | None:
        """Return the group's fragment encoded earlier, if any."""
        return kept_fragment(self._store, self._key(group, following))

    def use(self, group: list[Segment], following: Segment | None,
            encoded: fragments.Encoded, fresh: bool) -> None:
        """Note that the book holds this fragment; keep it first if it was encoded here."""
        key = self._key(group, following)
        if fresh:
            keep_fragment(self._store, key, encoded)
        with self._lock:  # fragments are encoded on several threads
            self.used.append({
                "first": group[0].index, "last": group[-1].index,
                "chapter": group[0].chapter, "key": key, "rate": self._rate,
                "samples": fragments.decoded_samples(encoded.book, self._rate, self._fmt)})


def _encode_fragments(segments: list[Segment], finished: Callable[[Segment], Audio],
                      timeline: Timeline, fmt: str, main: Path, chapter_files: list[Path],
                      marks: list[Mark], threads: int, kept: KeptFragments) -> None:
    """Join the book and its chapter files from MP3 or AAC fragments, one per group of
    segments between two cuts of the timeline: those `kept` from earlier, the rest encoded
    here on threads and kept (fragments.py says how the joins stay exact). `marks`: the
    m4b's chapters."""
    cuts = [0, *timeline.breaks, len(segments)]
    groups = [segments[a:b] for a, b in itertools.pairwise(cuts)]
    after = [segments[b] if b < len(segments) else None for b in cuts[1:]]
    rate = timeline.rate

    def lengths(n: int) -> tuple[int, int]:
        """Return group n's span in the book (to the next cut) and its speech."""
        first, end = cuts[n], cuts[n + 1]
        speech = timeline.starts[end - 1] + timeline.samples[end - 1] - timeline.starts[first]
        span = (timeline.starts[end] if end < len(segments) else timeline.total) \
            - timeline.starts[first]
        return span, speech

    def whole(encoded: fragments.Encoded, n: int) -> bool:
        """Whether a kept fragment holds every frame it should (one still being written by
        a fragment task, or cut short, does not): its span, and the chapter's speech."""
        span, speech = lengths(n)
        end = cuts[n + 1]
        book = span - fragments.overhead(rate, fmt) if end < len(segments) else span
        if fragments.frames_in(encoded.book, fmt) != fragments.frames_for(book, rate, fmt):
            return False
        closes = end < len(segments) and segments[end].chapter != segments[end - 1].chapter
        return not closes or (encoded.closing is not None and fragments.frames_in(
            encoded.closing, fmt) == fragments.frames_for(speech, rate, fmt))

    def fragment(n: int) -> fragments.Encoded:
        encoded = kept.find(groups[n], after[n])
        fresh = encoded is None or not whole(encoded, n)
        if encoded is None or fresh:
            encoded = fragments.encode_group(groups[n], after[n], finished, rate, fmt)
        kept.use(groups[n], after[n], encoded, fresh)
        return encoded

    files = iter(chapter_files)
    chapter_file: fragments.Joiner | None = None
    with fragments.Joiner(main, fmt, marks) as book, contextlib.ExitStack() as stack:
        encoded = stack.enter_context(
            contextlib.closing(parts.ordered(fragment, range(len(groups)), threads)))
        for n, piece in enumerate(encoded):
            span, speech = lengths(n)
            book.add(piece.book, span)
            if not chapter_files:
                continue
            if chapter_file is None:
                chapter_file = stack.enter_context(fragments.Joiner(next(files), fmt))
            chapter_file.add(piece.closing or piece.book,
                             speech if piece.closing is not None else span)
            if piece.closing is not None:  # the chapter ends here
                chapter_file.close()
                chapter_file = None


def assemble(job: Job, segments: list[Segment], store: MediaStore, target: MediaStore,
             part_key: Callable[[Segment], str], lufs: float = 0.0,
             checks: dict[str, Any] | None = None, threads: int = 0,
             words: Words | None = None, normalized: bool = True,
             heard: tuple[dict[int, float | None], dict[str, Any]] | None = None,
             fragments_used: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write the job's media to `target`; return the result record (keys, not URLs).

    Each part is normalised to `lufs` integrated loudness (0: left as synthesised). Each is
    checked as it is read (PartLost); `checks` are the caller's, recorded in the manifest.
    Parts are read and finished on `threads` threads (0: one per core); MP3 is encoded on
    them too, in fragments (fragments.py), other formats by one encoder. Subtitle cues come
    from `words` where a segment has them (timeline.sentence_cues), else are estimated.
    `heard`: each segment's word error rate and the job's verification summary (`verify`),
    recorded in the manifest and the result. `fragments_used` gets the MP3 or AAC fragments
    the book was joined from (KeptFragments.used), for the live stream's record.
    """
    rate = _sample_rate(segments[0], store, part_key)
    base, ext = version_prefix(job.id, job.version or 1), EXTENSIONS[job.response_format]
    master = job.options.get("mastering") == "acx"
    timeline = _timeline(job.response_format, segments, rate, master)
    spans = chapter_spans(job, segments, timeline)
    finished = functools.partial(parts.finish, store=store, part_key=part_key, lufs=lufs, rate=rate,
                                 master=_targets(segments, spans, timeline) if master else None)
    fmt = job.response_format

    kept = KeptFragments(store, job.id, lufs, rate, fmt)
    chapters, size, measured = _audio_files(job, segments, spans, timeline, finished, kept,
                                            store, target, threads or cores())
    if fragments_used is not None:
        fragments_used.extend(kept.used)
    if measured is not None:
        checks = (checks or {}) | {"mastering": measured}
    subtitle_keys, timing = _subtitle_files(job, segments, timeline, words, normalized, target)
    target.put(keys.manifest_key(base),
               json.dumps(manifest(job, segments, timeline, chapters, checks,
                                   timing if subtitle_keys else None, heard), indent=1).encode())
    return {"store": job.output_url, "sample_rate": mastering.RATE if master else rate,
            "duration_seconds": timeline.total / rate, "key": keys.audio_key(base, ext),
            "bytes": size, "chapters": chapters, "subtitles": subtitle_keys,
            "manifest_key": keys.manifest_key(base)} | (
        {"verification": heard[1]} if heard is not None else {}) | (
        {"mastering": {"profile": "acx", "ok": measured["ok"]}} if measured else {})


def _sample_rate(first: Segment, store: MediaStore, part_key: Callable[[Segment], str]) -> int:
    """The parts' sample rate, read from the first part's header."""
    try:
        with store.open(part_key(first)) as f:
            return int(sf.info(f).samplerate)
    except FileNotFoundError:
        raise parts.PartLost(first, "its part is missing from storage") from None


def _timeline(fmt: str, segments: list[Segment], rate: int, master: bool) -> Timeline:
    """Where every segment and silence falls: mastered books get room tone at both ends;
    fragment formats put every cut on a whole frame."""
    if master:
        return Timeline(segments, rate, lead=round(mastering.LEAD_SECONDS * rate),
                        tail=round(mastering.TAIL_SECONDS * rate))
    if fmt in fragments.FORMATS:
        return Timeline(segments, rate, fragments.frame_samples(rate, fmt),
                        fragments.overhead(rate, fmt))
    return Timeline(segments, rate)


def _audio_files(job: Job, segments: list[Segment], spans: list[Span], timeline: Timeline,
                 finished: Callable[[Segment], Audio], kept: KeptFragments,
                 store: MediaStore, target: MediaStore, threads: int
                 ) -> tuple[list[dict[str, Any]], int, dict[str, Any] | None]:
    """Encode the book (and its chapter files when it has several chapters), tag them and put
    them in `target`: return the chapters' records, the book's size in bytes and, for a
    mastered book, what mastering measured. `kept` finds a fragment encoded earlier."""
    fmt, ext, rate = job.response_format, EXTENSIONS[job.response_format], timeline.rate
    base, master = version_prefix(job.id, job.version or 1), job.options.get("mastering") == "acx"
    split = len(job.chapters) > 1
    marks = [span.mark(rate) for span in spans]
    with tempfile.TemporaryDirectory(prefix="narrator-") as tmp:
        main = Path(tmp) / f"audio.{ext}"
        files = [Path(tmp) / f"chapter-{span.number:03d}.{ext}" for span in spans] \
            if split else []
        if fmt in fragments.FORMATS and not master:
            _encode_fragments(segments, finished, timeline, fmt, main, files, marks, threads,
                              kept)
        else:
            with contextlib.closing(parts.ordered(finished, segments, threads)) as blocks:
                _encode(segments, blocks, timeline, fmt, main, marks, files, master)
        measured = _measured(spans, files or [main]) if master else None
        tags = tags_of(job, store) if fmt in TAGGED else None
        made = Provenance(job.model, job.voice, ids.job_id(job.id))
        marked = made if marking() else None  # the tags carry the marks too
        if tags is not None:
            write_tags(main, fmt, tags, marks if split else None, marked)
            for path, span in zip(files, spans, strict=False):  # none unless split
                write_tags(path, fmt, tags.for_chapter(span.title, span.number + 1, len(spans)),
                           made=marked)
        mark_files([main, *files], fmt, made, tagged=tags is not None)
        target.put_file(str(main), keys.audio_key(base, ext))
        chapters = [span.record(rate) for span in spans]
        for chapter, span, path in zip(chapters, spans, files, strict=False):
            chapter["key"] = keys.chapter_key(base, span.number, ext)
            target.put_file(str(path), chapter["key"])
        return chapters, main.stat().st_size, measured


def _subtitle_files(job: Job, segments: list[Segment], timeline: Timeline, words: Words | None,
                    normalized: bool, target: MediaStore) -> tuple[dict[str, str], Any]:
    """Write the subtitles the job asked for (SRT, VTT, the word track): their keys, and how
    each segment's cues were timed (for the manifest)."""
    base = version_prefix(job.id, job.version or 1)
    if words is not None:  # read each segment's words once, for the cues and the word track
        kept = {s.index: words(s) for s in segments}
        words = lambda s: kept[s.index]  # noqa: E731
    cues, timing = sentence_cues(segments, timeline, (job.options.get("language") or "en")[:2],
                                 words, lambda s: reader_for(job.options | (s.overrides or {}),
                                                             normalized))
    written = {}
    for kind in job.options.get("subtitles") or []:
        written[kind] = keys.subtitles_key(base, kind)
        if kind == "words":
            target.put(written[kind], json.dumps(
                word_track(segments, timeline, words, timing)).encode())
            continue
        speakers = cue_speakers(segments, timeline, cues, job.options["cast"]) \
            if kind == "vtt" and job.options.get("cast") else None
        target.put(written[kind], subtitles(cues, kind, speakers).encode())
    return written, timing
