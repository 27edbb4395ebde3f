"""Text processing: clean, split into sentences (pysbd) and pack into segments."""

import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

import structlog

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_BLANK_LINES = re.compile(r"\n\s*\n")
_SPACES = re.compile(r"\s+")
_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff66-\uff9f]")  # kana, kanji
log = structlog.get_logger()


def japanese(text: str) -> bool:
    """Say whether a text holds kana or kanji (Kokoro then reads it as Japanese)."""
    return _JAPANESE.search(text) is not None


def _letters(text: str) -> str:
    """Return the text without whitespace: what a plan must keep, in order."""
    return _SPACES.sub("", text)


# Unicode's stream-safe limit (UAX #15): a run of more than 30 combining marks is cut to 30
# before normalising. Canonical ordering sorts each run, so an uncut run of 60,000 marks took
# 2.4 s per 40,000 in NFC, and hours at the job limit.
MAX_COMBINING_RUN = 30


@lru_cache
def _combining_runs() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Return patterns for runs of more than MAX_COMBINING_RUN combining marks: of the Basic
    Multilingual Plane's marks (a bitmap class: 18 ms per 2,000,000 characters), and of all
    marks (ranges: 180 ms), for texts with characters beyond it. Built on first use: listing
    the marks takes about 50 ms."""
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c))]

    def run_of(codes: list[int]) -> str:
        ranges: list[list[int]] = []
        for c in codes:
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
        cls = "[" + "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "")
                            for a, b in ranges) + "]"
        return f"({cls}{{{MAX_COMBINING_RUN}}}){cls}+"

    return re.compile(run_of([c for c in marks if c <= 0xFFFF])), re.compile(run_of(marks))


_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


def _cut_combining_runs(text: str) -> str:
    """Cut every run of more than MAX_COMBINING_RUN combining marks to that many."""
    if text.isascii():
        return text
    plane, every = _combining_runs()
    text = plane.sub(r"\1", text)
    return every.sub(r"\1", text) if _ASTRAL.search(text) else text


def _spoken_letters(text: str) -> str:
    """Return the text's letters and digits: what a plan must keep, in order."""
    return "".join(ch for ch in text if ch.isalnum())


def clean(text: str) -> str:
    """Normalise Unicode (NFC), drop control characters and unify line endings."""
    text = _cut_combining_runs(text)
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text).replace("\t", " ")


def speakable(text: str) -> bool:
    """Say whether the cleaned text has anything to pronounce (a letter or a digit)."""
    return any(ch.isalnum() for ch in text)


def paragraphs(text: str) -> Iterator[str]:
    """Yield paragraphs (split on blank lines) with their whitespace collapsed."""
    for block in _BLANK_LINES.split(text):
        block = _SPACES.sub(" ", block).strip()
        if block:
            yield block


@lru_cache
def _pysbd_language(language: str) -> str:
    """Return `language` if pysbd has rules for it, else English."""
    from pysbd.languages import LANGUAGE_CODES

    return language if language in LANGUAGE_CODES else "en"


def sentences(paragraph: str, language: str = "en") -> list[str]:
    """Split a paragraph into sentences with pysbd.

    A Segmenter per call: pysbd keeps the text it is splitting on the instance, so a shared
    one mixes up the texts of threads that split at once. Building one costs under 1 µs
    against about 900 µs to split a paragraph (bench.segmenter).
    """
    import pysbd

    segmenter = pysbd.Segmenter(language=_pysbd_language(language), clean=False)
    found = [s.strip() for s in segmenter.segment(paragraph) if s.strip()]
    if _letters("".join(found)) != _letters(paragraph):
        # pysbd drops characters from some odd punctuation runs: keep the text, split coarser.
        log.warning("text.split_lossy", chars=len(paragraph))
        return [paragraph.strip()] if paragraph.strip() else []
    return found


_CLAUSE_END = re.compile(r"(?<=[,;:\u2013\u2014])\s+")  # , ; : – — then a space ("1,000" stays)


def clauses(sentence: str, limit: int) -> list[str]:
    """Split a sentence longer than `limit` after its commas, semicolons, colons and dashes,
    joining neighbours again while they fit; one without such a break stays whole."""
    if len(sentence) <= limit:
        return [sentence]
    out: list[str] = []
    for piece in _CLAUSE_END.split(sentence):
        if out and len(out[-1]) + 1 + len(piece) <= limit:
            out[-1] += " " + piece
        else:
            out.append(piece)
    return out


def _hard_split(sentence: str, limit: int) -> Iterator[str]:
    """Split a sentence that alone is over the limit at word boundaries."""
    piece = ""
    for word in sentence.split(" "):
        if piece and len(piece) + 1 + len(word) > limit:
            yield piece
            piece = ""
        piece = f"{piece} {word}" if piece else word
        while len(piece) > limit:
            yield piece[:limit]
            piece = piece[limit:]
    if piece:
        yield piece


def pack(items: Iterable[str], limit: int) -> Iterator[str]:
    """Greedily join sentences into pieces of at most `limit` characters."""
    piece = ""
    for sentence in items:
        for part in _hard_split(sentence, limit) if len(sentence) > limit else (sentence,):
            if piece and len(piece) + 1 + len(part) > limit:
                yield piece
                piece = ""
            piece = f"{piece} {part}" if piece else part
    if piece:
        yield piece


@dataclass(frozen=True)
class Piece:
    """One planned segment: its chapter, text, the silence after it, and its speaker (a
    `[voice:name]` mark's name; None: the chapter's voice)."""

    chapter: int
    text: str
    pause_after: float
    speaker: str | None = None


@dataclass(frozen=True)
class Gaps:
    """Silences inserted between segments, paragraphs and chapters, in seconds."""

    segment: float = 0.25
    paragraph: float = 0.6
    chapter: float = 1.5


# Marks are short: the quantifiers inside them are bounded, so a mark left open (a "[voice:"
# and two million spaces) is seen to be text after a few characters, not at the text's end.
PAUSE = re.compile(r"\[pause:\s{0,8}(\d{1,6}(?:\.\d{1,6})?)\s{0,8}s\]", re.IGNORECASE)
MAX_PAUSE_SECONDS = 30.0  # one gap's silence, however many marks it holds
MAX_MARKED_SILENCE_SECONDS = 3600.0  # a job's silence from marks, all gaps together


# `[voice:alice]` speaks what follows in the cast's voice for alice, up to the next mark or the
# chapter's end; `[voice]` goes back to the chapter's voice. `\[voice:...]` is text, said
# without its backslash. The name is taken whole and stripped in code: a name's class and
# the spaces around it must not overlap in the pattern (that backtracked in cubic time).
# (The lookbehind follows the "[", so that the search skips to each "[" at C speed.)
VOICE = re.compile(r"\[(?<!\\\[)voice(?::([^\]\[]{0,80})|\s{0,8})\]", re.IGNORECASE)
_ESCAPED_VOICE = re.compile(r"\\(?=\[voice\b)", re.IGNORECASE)
MARKS = re.compile(f"{PAUSE.pattern}|{VOICE.pattern}", re.IGNORECASE)


def strip_pauses(text: str) -> str:
    """Remove inline pause and voice marks (sync speech does not honour them)."""
    return _ESCAPED_VOICE.sub("", MARKS.sub(" ", text))


def speakers(text: str) -> list[str]:
    """Return the speaker names a text's `[voice:name]` marks give, in order, lower case."""
    return [m.group(1).strip().lower() for m in VOICE.finditer(text) if m.group(1)
            and m.group(1).strip()]


def voiced_runs(text: str) -> list[tuple[str | None, str]]:
    """Split a chapter's text at its `[voice:name]` marks: (speaker or None, text) runs, the
    empty ones left out (what the job preview shows)."""
    runs: list[tuple[str | None, str]] = []
    speaker, start = None, 0
    for mark in VOICE.finditer(text):
        runs.append((speaker, text[start:mark.start()]))
        speaker, start = (mark.group(1) or "").strip().lower() or None, mark.end()
    runs.append((speaker, text[start:]))
    return [(who, " ".join(strip_pauses(part).split())) for who, part in runs
            if speakable(part)]


def _parts(paragraph: str) -> Iterator[tuple[str, float | None, str | bool | None]]:
    """Split a paragraph at `[pause:1.5s]` and `[voice:name]` marks: (text, pause after it or
    None, the speaker from here on: a name, None for the chapter's voice, False: no change)."""
    start = 0
    for mark in MARKS.finditer(paragraph):
        text = _ESCAPED_VOICE.sub("", paragraph[start : mark.start()])
        if mark.group(0)[1:6].lower() == "pause":
            yield text, min(float(mark.group(1)), MAX_PAUSE_SECONDS), False
        else:
            yield text, None, (mark.group(2) or "").strip().lower() or None
        start = mark.end()
    yield _ESCAPED_VOICE.sub("", paragraph[start:]), None, False


@dataclass
class _Draft:
    """A piece while its chapter is planned: the silences that follow it so far."""

    text: str
    speaker: str | None = None
    gap: float = 0.0  # the largest structural gap after it (segment, paragraph, chapter)
    marks: list[float] = field(default_factory=list)  # inline [pause:Ns] marks after it

    def pause(self, budget: list[float]) -> float:
        """Marks win over structure: their sum (at most MAX_PAUSE_SECONDS, and what is left
        of the job's `budget` of marked silence), else the structural gap."""
        if not self.marks or budget[0] <= 0:
            return self.gap
        marked = min(sum(self.marks), MAX_PAUSE_SECONDS, budget[0])
        budget[0] -= marked
        return marked


def plan_pieces(chapters: list[str], limit: int, gaps: Gaps,
                language: str = "en") -> Iterator[Piece]:
    """Yield the segments of a job: chapters, then paragraphs, then packed sentences.

    The silence after a piece is the inline `[pause:Ns]` marks that follow it (summed, at
    most MAX_PAUSE_SECONDS, and MAX_MARKED_SILENCE_SECONDS for the job), or else the largest
    structural gap that follows it (segment, paragraph or chapter). A `[voice:name]` mark
    ends the piece before it: a piece has one speaker. Text with nothing to say (no letter
    or digit: "...", a dash, "* * *") is silence, never a piece: a paragraph of it is a
    scene break (the chapter gap after the piece before it), a piece of it a paragraph gap.
    """
    budget = [MAX_MARKED_SILENCE_SECONDS]
    for number, text in enumerate(chapters):
        drafts: list[_Draft] = []
        adjacent = False  # the next piece follows the last one directly: a segment gap
        speaker: str | None = None
        for n, paragraph in enumerate(paragraphs(clean(text))):
            if n and drafts:
                drafts[-1].gap = max(drafts[-1].gap, gaps.paragraph)
                adjacent = False
            if not speakable(paragraph) and not MARKS.search(paragraph):
                if drafts:  # a scene break
                    drafts[-1].gap = max(drafts[-1].gap, gaps.chapter)
                continue
            for part, pause, switch in _parts(paragraph):
                for piece in pack(sentences(part.strip(), language), limit) if part.strip() \
                        else ():
                    if not speakable(piece):
                        if drafts:
                            drafts[-1].gap = max(drafts[-1].gap, gaps.paragraph)
                        continue
                    if adjacent:
                        drafts[-1].gap = max(drafts[-1].gap, gaps.segment)
                    drafts.append(_Draft(piece, speaker))
                    adjacent = True
                if pause is not None:
                    if drafts:
                        drafts[-1].marks.append(pause)
                    adjacent = False
                if switch is not False:
                    speaker = switch if isinstance(switch, str) else None
        if drafts:
            drafts[-1].gap = max(drafts[-1].gap, gaps.chapter)
        for draft in drafts:
            yield Piece(number, draft.text, draft.pause(budget), draft.speaker)


class IncompletePlan(ValueError):
    """The planned segments do not hold the job's text exactly."""


def check_plan(chapters: list[str], pieces: list[Piece]) -> dict[str, int]:
    """Check that the pieces hold every chapter's text, whole and in order.

    The letters and digits of each chapter, `[pause:Ns]` and `[voice:name]` marks aside,
    must be the pieces' letters and digits exactly (punctuation with nothing to say becomes
    silence). Return what was checked (for the manifest); raise IncompletePlan at the first
    gap.
    """
    if any(b.chapter < a.chapter for a, b in pairwise(pieces)):
        raise IncompletePlan("the planned segments are out of chapter order")
    characters = 0
    for number, text in enumerate(chapters):
        expected = "".join(_spoken_letters(strip_pauses(p)) for p in paragraphs(clean(text)))
        got = "".join(_spoken_letters(p.text) for p in pieces if p.chapter == number)
        if got != expected:
            at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                      min(len(got), len(expected)))
            raise IncompletePlan(
                f"chapter {number + 1}: the planned segments hold {len(got)} of its "
                f"{len(expected)} characters (whitespace aside) and part from its text at "
                f"character {at}, near {expected[max(0, at - 20):at + 20]!r}")
        characters += len(expected)
    if any(p.chapter >= len(chapters) for p in pieces):
        raise IncompletePlan("a planned segment belongs to no chapter of the job")
    return {"chapters": len(chapters), "segments": len(pieces), "characters": characters}
