"""Assemble a job: stream parts in order with planned silences, encode, subtitle, manifest."""

import io
import json
import queue
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from models import Job, Segment
from storage import MediaStore
from workers.audio import EXTENSIONS, fade_edges, loudness_normalize
from workers.audio import encode_to as encode_blocks
from workers.engines import Audio
from workers.text import sentences


def part_bytes(audio: Audio, rate: int) -> bytes:
    """Encode a part as 32-bit float WAV: lossless before the loudness change at assembly.

    Parts are working files, deleted once the job is assembled. They are written on the GPU
    worker, where FLAC would cost 8 times the CPU (8 ms against 1 ms per 20 s of speech), and
    every millisecond there holds up the engine's next batch.
    """
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def timestamp(seconds: float, sep: str) -> str:
    """Format seconds as HH:MM:SS{sep}mmm (',' for SRT, '.' for VTT)."""
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def subtitles(cues: list[tuple[float, float, str]], kind: str) -> str:
    """Render (start, end, text) cues as SRT or WebVTT."""
    sep = "," if kind == "srt" else "."
    blocks = [
        (f"{n}\n" if kind == "srt" else "")
        + f"{timestamp(start, sep)} --> {timestamp(end, sep)}\n{text}\n"
        for n, (start, end, text) in enumerate(cues, 1)
    ]
    head = "WEBVTT\n\n" if kind == "vtt" else ""
    return head + "\n".join(blocks)


class Timeline:
    """Sample offsets of each segment in the final audio, from the exact part lengths."""

    def __init__(self, segments: list[Segment], rate: int) -> None:
        self.rate = rate
        self.starts: list[int] = []
        cursor = 0
        for n, segment in enumerate(segments):
            self.starts.append(cursor)
            cursor += segment.samples or 0
            if n < len(segments) - 1:
                cursor += self.gap(segment)
        self.total = cursor

    def gap(self, segment: Segment) -> int:
        """Return the silence after a segment, in samples."""
        return round(segment.pause_after * self.rate)


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


def sentence_cues(segments: list[Segment], timeline: Timeline,
                  language: str) -> list[tuple[float, float, str]]:
    """One cue per sentence: (start s, end s, text).

    Each segment's span is exact, from the sample counts of its part. Inside a segment, which
    the engine spoke in one go, the span is shared among its sentences by their length in
    letters and digits, an estimate; the segment's last cue ends exactly where its audio ends.
    """
    cues = []
    for n, segment in enumerate(segments):
        start, samples = timeline.starts[n], segment.samples or 0
        parts = sentences(segment.text, language) or [segment.text]
        weights = [max(1, sum(ch.isalnum() for ch in part)) for part in parts]
        total, done = sum(weights), 0
        for part, weight in zip(parts, weights, strict=True):
            begin = start + samples * done // total
            done += weight
            cues.append((begin / timeline.rate, (start + samples * done // total) / timeline.rate,
                         part))
    return cues


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
    fmt, ext, base = job.response_format, EXTENSIONS[job.response_format], f"jobs/{job.id}"
    result: dict[str, Any] = {"store": job.output_url, "sample_rate": rate,
                              "duration_seconds": timeline.total / rate}
    spans = []  # (chapter number, its segments, start and end sample)
    for number, group in groupby(enumerate(segments), key=lambda pair: pair[1].chapter):
        pairs = list(group)
        members = [segment for _, segment in pairs]
        end = timeline.starts[pairs[-1][0]] + (members[-1].samples or 0)
        spans.append((number, members, timeline.starts[pairs[0][0]], end))
    titles = [job.chapters[n].get("title") or f"Chapter {n + 1}" for n, *_ in spans]
    marks = [(title, start / rate, end / rate)
             for title, (_, _, start, end) in zip(titles, spans, strict=True)]
    split = len(job.chapters) > 1
    with tempfile.TemporaryDirectory(prefix="narrator-") as tmp:
        main = Path(tmp) / f"audio.{ext}"
        files = [Path(tmp) / f"chapter-{number:03d}.{ext}" for number, *_ in spans] \
            if split else []
        _encode(segments, _finished(segments, store, part_key, lufs, rate), timeline, fmt,
                main, marks, files)
        target.put_file(str(main), f"{base}/audio.{ext}")
        result |= {"key": f"{base}/audio.{ext}", "bytes": main.stat().st_size}
        chapters = []
        for n, (title, (number, _, start, end)) in enumerate(zip(titles, spans, strict=True)):
            chapter: dict[str, Any] = {
                "title": title, "start_seconds": start / rate,
                "duration_seconds": (end - start) / rate,
            }
            if split:
                chapter["key"] = f"{base}/chapters/{number:03d}.{ext}"
                target.put_file(str(files[n]), chapter["key"])
            chapters.append(chapter)
        result["chapters"] = chapters
    cues = sentence_cues(segments, timeline, (job.options.get("language") or "en")[:2])
    result["subtitles"] = {}
    for kind in job.options.get("subtitles") or []:
        key = f"{base}/subtitles.{kind}"
        target.put(key, subtitles(cues, kind).encode())
        result["subtitles"][kind] = key
    manifest = {
        "id": f"job_{job.id.hex}", "model": job.model, "voice": job.voice,
        "response_format": fmt, "speed": job.speed, "options": job.options,
        "sample_rate": rate,
        "usage": {"input_characters": job.input_characters,
                  "audio_seconds": timeline.total / rate},
        "chapters": [{k: v for k, v in c.items() if k != "key"} for c in chapters],
        "checks": (checks or {}) | {"parts": {
            "segments": len(segments), "samples": sum(s.samples or 0 for s in segments),
            "verified": "every part present, with the samples recorded for its segment"}},
        "segments": [
            {"index": s.index, "chapter": s.chapter, "chars": len(s.text),
             "start_seconds": timeline.starts[n] / rate,
             "duration_seconds": (s.samples or 0) / rate, "attempts": s.attempts}
            | ({"quality": s.quality} if s.quality else {})
            for n, s in enumerate(segments)
        ],
    }
    result["manifest_key"] = f"{base}/manifest.json"
    target.put(result["manifest_key"], json.dumps(manifest, indent=1).encode())
    return result
