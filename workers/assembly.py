"""Assemble a job: stream parts in order with planned silences, encode, subtitle, manifest."""

import io
import json
import queue
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from core.audio import EXTENSIONS, fade_edges, loudness_normalize
from core.audio import encode_to as encode_blocks
from core.keys import job_prefix
from models import Job, Segment
from storage import MediaStore
from workers.engines import Audio
from workers.timeline import Timeline, chapter_spans, manifest, sentence_cues, subtitles


def part_bytes(audio: Audio, rate: int) -> bytes:
    """Encode a part as 32-bit float WAV: lossless before the loudness change at assembly.

    Parts are working files, deleted once the job is assembled. They are written on the GPU
    worker, where FLAC would cost 8 times the CPU (8 ms against 1 ms per 20 s of speech), and
    every millisecond there holds up the engine's next batch.
    """
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


class PartLost(Exception):
    """A done segment's part is missing or not the audio recorded for it: synthesise again."""

    def __init__(self, segment: Segment, reason: str) -> None:
        super().__init__(f"segment {segment.index}: {reason}")
        self.segment = segment


def read_part(segment: Segment, store: MediaStore, part_key: Callable[[Segment], str]) -> Audio:
    """Read one part, checking that it is the audio recorded for its segment."""
    try:
        with store.open(part_key(segment)) as f:
            audio, _ = sf.read(f, dtype="float32")
    except FileNotFoundError:
        raise PartLost(segment, "its part is missing from storage") from None
    if not len(audio) or len(audio) != segment.samples:
        raise PartLost(segment, f"its part holds {len(audio)} samples, "
                                f"{segment.samples} were recorded")
    if not np.isfinite(audio).all():
        raise PartLost(segment, "its part holds samples that are not finite")
    return np.asarray(audio, dtype=np.float32)


def _finished(segments: list[Segment], store: MediaStore, part_key: Callable[[Segment], str],
              lufs: float, rate: int) -> Iterator[Audio]:
    """Yield each part once, finished: normalised to `lufs` (0: as is), edges faded.

    Finishing happens here, on the worker that assembles, not on the GPU worker that
    synthesised the part: there, every millisecond of CPU delays the engine's next batch.
    """
    for segment in segments:
        audio = read_part(segment, store, part_key)
        if lufs:
            audio = loudness_normalize(audio, rate, lufs)
        yield fade_edges(np.asarray(audio, dtype=np.float32), rate)


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
            chapter_files: list[Path]) -> None:
    """Encode the whole book and, if `chapter_files`, each chapter, from one read of the parts.

    Two encoder threads (libsndfile and PyAV release the GIL) take the same finished blocks:
    one writes the book, the other the chapters in turn, each chapter with its inner silences.
    """
    rate, book = timeline.rate, _Feed()
    chapters = [_Feed() for _ in chapter_files]

    def encode_chapters() -> None:
        for feed, path in zip(chapters, chapter_files, strict=True):
            encode_blocks(feed, rate, fmt, path)

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="encode") as pool:
        encoders = [pool.submit(encode_blocks, book, rate, fmt, main, marks)]
        if chapters:
            encoders.append(pool.submit(encode_chapters))
        chapter = 0
        try:
            for n, (segment, audio) in enumerate(zip(segments, blocks, strict=True)):
                last = n == len(segments) - 1
                book.put(audio, encoders)
                if not last:
                    book.put(np.zeros(timeline.gap(segment), dtype=np.float32), encoders)
                if chapters:
                    ends_chapter = last or segments[n + 1].chapter != segment.chapter
                    chapters[chapter].put(audio, encoders)
                    if ends_chapter:
                        chapters[chapter].close(encoders[-1])
                        chapter += 1
                    else:
                        chapters[chapter].put(np.zeros(timeline.gap(segment), np.float32),
                                              encoders)
        finally:  # on an error too: let the encoders finish, so the pool can close
            book.close(encoders[0])
            for feed in chapters[chapter:]:
                feed.close(encoders[-1])
        for encoder in encoders:
            encoder.result()


def assemble(job: Job, segments: list[Segment], store: MediaStore, target: MediaStore,
             part_key: Callable[[Segment], str], lufs: float = 0.0,
             checks: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the job's media to `target`; return the result record (keys, not URLs).

    Each part is normalised to `lufs` integrated loudness (0: left as synthesised). Each is
    checked as it is read (PartLost); `checks` are the caller's, recorded in the manifest.
    """
    try:
        with store.open(part_key(segments[0])) as f:
            rate = sf.info(f).samplerate
    except FileNotFoundError:
        raise PartLost(segments[0], "its part is missing from storage") from None
    timeline = Timeline(segments, rate)
    fmt, ext, base = job.response_format, EXTENSIONS[job.response_format], job_prefix(job.id)
    spans = chapter_spans(job, segments, timeline)
    split = len(job.chapters) > 1
    with tempfile.TemporaryDirectory(prefix="narrator-") as tmp:
        main = Path(tmp) / f"audio.{ext}"
        files = [Path(tmp) / f"chapter-{span.number:03d}.{ext}" for span in spans] \
            if split else []
        _encode(segments, _finished(segments, store, part_key, lufs, rate), timeline, fmt,
                main, [span.mark(rate) for span in spans], files)
        target.put_file(str(main), f"{base}/audio.{ext}")
        chapters = [span.record(rate) for span in spans]
        for chapter, span, path in zip(chapters, spans, files, strict=False):
            chapter["key"] = f"{base}/chapters/{span.number:03d}.{ext}"
            target.put_file(str(path), chapter["key"])
        size = main.stat().st_size
    cues = sentence_cues(segments, timeline, (job.options.get("language") or "en")[:2])
    subtitle_keys = {}
    for kind in job.options.get("subtitles") or []:
        subtitle_keys[kind] = f"{base}/subtitles.{kind}"
        target.put(subtitle_keys[kind], subtitles(cues, kind).encode())
    target.put(f"{base}/manifest.json",
               json.dumps(manifest(job, segments, timeline, chapters, checks), indent=1).encode())
    return {"store": job.output_url, "sample_rate": rate,
            "duration_seconds": timeline.total / rate, "key": f"{base}/audio.{ext}",
            "bytes": size, "chapters": chapters, "subtitles": subtitle_keys,
            "manifest_key": f"{base}/manifest.json"}
