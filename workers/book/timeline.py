"""Where everything sits in a job's audio: segment offsets, chapter spans, cues, manifest."""

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Protocol

from core.cast import voice_for
from core.ids import job_id
from core.lexicon import Reader
from core.normalize import spoken
from core.text import sentences
from models import Job, Segment
from workers.aligners import Word, words_of
from workers.book.cues import lines
from workers.book.cues import pieces as cue_pieces

Words = Callable[[Segment], "list[Word] | None"]  # a segment's aligned words, if kept


def timestamp(seconds: float, sep: str) -> str:
    """Format seconds as HH:MM:SS{sep}mmm (',' for SRT, '.' for VTT)."""
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def subtitles(cues: list[tuple[float, float, str]], kind: str,
              voices: list[str | None] | None = None) -> str:
    """Render (start, end, text) cues as SRT or WebVTT; `voices`: each cue's speaker, which
    WebVTT marks with a `<v Name>` tag."""
    sep = "," if kind == "srt" else "."
    tags = [f"<v {v}>" if v and kind == "vtt" else "" for v in voices or [None] * len(cues)]
    blocks = [
        (f"{n}\n" if kind == "srt" else "")
        + f"{timestamp(start, sep)} --> {timestamp(end, sep)}\n{tag}{_cue_text(text, kind)}\n"
        for n, ((start, end, text), tag) in enumerate(zip(cues, tags, strict=True), 1)
    ]
    head = "WEBVTT\n\n" if kind == "vtt" else ""
    return head + "\n".join(blocks)


def _cue_text(text: str, kind: str) -> str:
    """Return a cue's text as its format takes it: on one line or two of at most 42
    characters (workers/book/cues.py), no "-->" (a timing line to a parser), and in WebVTT
    with &, < and > escaped (else read as markup)."""
    text = " ".join(text.split()).replace("-->", "->")
    if kind == "vtt":
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "\n".join(lines(text))


# Where an encoder that works in frames may cut the audio: after a silence at least this long
# (rate-independent, so the cut points are known from the plan alone), and between chapters.
CUT_SECONDS = 0.1


class Placed(Protocol):
    """What decides a cut: a segment's chapter and the silence planned after it."""

    chapter: int
    pause_after: float


def cuts_after(segment: Placed, following: Placed | None) -> bool:
    """Return whether the audio may be cut between `segment` and the one `following` it."""
    return following is not None and (segment.pause_after >= CUT_SECONDS
                                      or following.chapter != segment.chapter)


def gap_samples(segment: Placed, rate: int) -> int:
    """Return the silence planned after a segment, in samples at `rate`."""
    return round(segment.pause_after * rate)


def frame_span(content: int, gap: int, quantum: int, min_gap: int) -> int:
    """Return the samples from a cut to the next: `content` plus the silence after it.

    The silence is the planned `gap` changed by half a quantum at most, so that the span is a
    whole number of quanta, and never shorter than `min_gap`.
    """
    nearest = round((content + gap) / quantum) * quantum
    return max(nearest, -(-(content + min_gap) // quantum) * quantum)


class Timeline:
    """Sample offsets of each segment in the final audio, from the exact part lengths.

    With a `quantum` (an encoder's frame), the audio is cut where `cuts_after` allows: each
    cut falls on a multiple of the quantum (`frame_span`), and `breaks` lists the segments
    that start after one. Between cuts, silences are exactly as planned. `lead` and `tail`
    are silences before the first segment and after the last (room tone, mastering.py).
    """

    def __init__(self, segments: list[Segment], rate: int, quantum: int = 1,
                 min_gap: int = 0, lead: int = 0, tail: int = 0) -> None:
        self.rate, self.lead, self.tail = rate, lead, tail
        self.starts: list[int] = []
        self.breaks: list[int] = []
        self.samples = [segment.samples or 0 for segment in segments]
        cursor = cut = lead
        for n, segment in enumerate(segments):
            self.starts.append(cursor)
            cursor += self.samples[n]
            following = segments[n + 1] if n + 1 < len(segments) else None
            if following is None:
                break
            if quantum > 1 and cuts_after(segment, following):
                cursor = cut = cut + frame_span(cursor - cut, self.gap(segment), quantum, min_gap)
                self.breaks.append(n + 1)
            else:
                cursor += self.gap(segment)
        self.total = cursor + tail

    def gap(self, segment: Placed) -> int:
        """Return the silence planned after a segment, in samples."""
        return gap_samples(segment, self.rate)

    def after(self, n: int) -> int:
        """Return the silence after the n-th segment in this timeline, in samples."""
        end = self.starts[n + 1] if n + 1 < len(self.starts) else self.total
        return end - self.starts[n] - self.samples[n]


@dataclass(frozen=True)
class Span:
    """One chapter in the final audio: its number, title, and start and end sample."""

    number: int
    title: str
    start: int
    end: int

    def mark(self, rate: int) -> tuple[str, float, float]:
        """Return the chapter mark an m4b carries: title, start and end in seconds."""
        return self.title, self.start / rate, self.end / rate

    def record(self, rate: int) -> dict[str, Any]:
        """Return the chapter as the result and the manifest list it."""
        return {"title": self.title, "start_seconds": self.start / rate,
                "duration_seconds": (self.end - self.start) / rate}


def chapter_spans(job: Job, segments: list[Segment], timeline: Timeline) -> list[Span]:
    """Return each chapter's span, from the exact segment offsets."""
    spans = []
    for number, group in groupby(enumerate(segments), key=lambda pair: pair[1].chapter):
        pairs = list(group)
        first, (last, tail) = pairs[0][0], pairs[-1]
        spans.append(Span(number, job.chapters[number].get("title") or f"Chapter {number + 1}",
                          timeline.starts[first], timeline.starts[last] + (tail.samples or 0)))
    return spans


def sentence_cues(segments: list[Segment], timeline: Timeline, language: str,
                  words: Words | None = None,
                  say: Callable[[Segment], Reader] | None = None
                  ) -> tuple[list[tuple[float, float, str]], list[str]]:
    """One cue per sentence (per piece where it is long: workers.book.cues), (start s, end s,
    text), and each segment's timing.

    Each segment's span is exact, from the sample counts of its part. Inside a segment, a
    sentence runs from its first word's start to its last word's end where `words` has the
    segment's aligned words ("aligned"); written sentences map to spoken words by counting
    the words of each one's spoken form (`say(segment)`: its reader, core.lexicon, with the
    job's lexicons or a re-render's; by default
    core.normalize.spoken), so cues show "3:45 p.m." where the aligner heard "three
    forty-five p m", and a lexicon's word as written where its alias was spoken. Otherwise
    ("estimated"), the span is shared among the sentences by their letters and digits, and
    the segment's last cue ends exactly where its audio ends.
    """
    cues, timing = [], []
    def plain(text: str) -> str:
        return spoken(text, language)

    readers = say or (lambda _: plain)
    for n, segment in enumerate(segments):
        start, samples = timeline.starts[n], segment.samples or 0
        parts = sentences(segment.text, language) or [segment.text]
        placed = words(segment) if words is not None else None
        spans = _word_spans(parts, placed, readers(segment)) if placed else None
        if spans is not None:
            timing.append("aligned")
            cues += [((start + a) / timeline.rate, (start + b) / timeline.rate, text)
                     for part, span in zip(parts, spans, strict=True)
                     for text, (a, b) in _clause_spans(part, span, readers(segment))]
            continue
        timing.append("estimated")
        pieces = [piece for part in parts for piece in cue_pieces(part)]
        weights = [max(1, sum(ch.isalnum() for ch in piece)) for piece in pieces]
        total, done = sum(weights), 0
        for piece, weight in zip(pieces, weights, strict=True):
            begin = start + samples * done // total
            done += weight
            cues.append((begin / timeline.rate, (start + samples * done // total) / timeline.rate,
                         piece))
    return cues, timing


def cue_speakers(segments: list[Segment], timeline: Timeline,
                 cues: list[tuple[float, float, str]], names: dict[str, Any]) -> list[str | None]:
    """Return the speaker of each cue (a cue lies inside one segment): its name as the job's
    cast wrote it, or None for the narrator."""
    out, n = [], 0
    for start, _, _ in cues:
        at = round(start * timeline.rate)
        while n + 1 < len(segments) and timeline.starts[n + 1] <= at:
            n += 1
        speaker = segments[n].speaker
        out.append(names.get(speaker, {}).get("name", speaker) if speaker else None)
    return out


def word_track(segments: list[Segment], timeline: Timeline, words: Words | None,
               timing: list[str]) -> dict[str, Any]:
    """The `words` subtitles: every aligned word in the book's time (seconds), segment by
    segment; segments whose cues are estimated have no words, and are listed."""
    rate, out = timeline.rate, []
    for n, segment in enumerate(segments):
        placed = words(segment) if words is not None and timing[n] == "aligned" else None
        out += [{"word": w.word, "start": round((timeline.starts[n] + w.start) / rate, 3),
                 "end": round((timeline.starts[n] + w.end) / rate, 3), "segment": segment.index}
                | ({"estimated": True} if w.estimated else {}) for w in placed or []]
    return {"words": out, "estimated_segments": [
        s.index for s, kind in zip(segments, timing, strict=True) if kind == "estimated"]}


def _counts(parts: list[str], say: Reader) -> list[int]:
    """How many spoken words each written part has (as the aligner was given them)."""
    return [len(words_of(say(part))) for part in parts]


def _word_spans(parts: list[str], placed: "list[Word]",
                say: Reader) -> "list[list[Word]] | None":
    """Each written sentence's words in its segment; None if the counts disagree."""
    counts = _counts(parts, say)
    if 0 in counts or sum(counts) != len(placed):
        return None
    spans, at = [], 0
    for count in counts:
        spans.append(placed[at:at + count])
        at += count
    return spans


def _clause_spans(sentence: str, placed: "list[Word]",
                  say: Reader) -> list[tuple[str, tuple[int, int]]]:
    """A sentence's cues from its words: one per piece where it is long (workers.book.cues)
    and its pieces' spoken words add up to the sentence's, else the whole sentence."""
    pieces = cue_pieces(sentence)
    counts = _counts(pieces, say)
    if len(pieces) == 1 or 0 in counts or sum(counts) != len(placed):
        return [(sentence, (placed[0].start, placed[-1].end))]
    out, at = [], 0
    for piece, count in zip(pieces, counts, strict=True):
        out.append((piece, (placed[at].start, placed[at + count - 1].end)))
        at += count
    return out


def manifest(job: Job, segments: list[Segment], timeline: Timeline,
             chapters: list[dict[str, Any]], checks: dict[str, Any] | None,
             timing: list[str] | None = None,
             heard: tuple[dict[int, float | None], dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    """Return the manifest: settings, usage, chapters, checks, and one entry per segment
    (with its cues' `timing`, aligned or estimated, where the job has subtitles, and its word
    error rate `wer` and a `misheard` flag where the job asked to `verify`)."""
    rate = timeline.rate
    summary = {"timing": {kind: timing.count(kind) for kind in ("aligned", "estimated")}} \
        if timing is not None else {}
    if heard is not None:
        summary["verification"] = heard[1]
    wer, flagged = (heard[0], set(heard[1]["flagged"])) if heard is not None else ({}, set())
    return summary | {
        "id": job_id(job.id), "model": job.model, "voice": job.voice,
        "response_format": job.response_format, "speed": job.speed, "options": job.options,
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
             "duration_seconds": (s.samples or 0) / rate, "attempts": s.attempts,
             "voice": voice_for(job.options, job.voice, s.chapter, s.speaker, s.overrides)}
            | ({"speaker": s.speaker} if s.speaker else {})
            | ({"quality": s.quality} if s.quality else {})
            | ({"timing": timing[n]} if timing is not None else {})
            | ({"wer": wer.get(s.index)} if heard is not None else {})
            | ({"misheard": True} if s.index in flagged else {})
            for n, s in enumerate(segments)
        ],
    }
