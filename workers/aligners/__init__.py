"""Aligners: word start and end times for audio whose words are known (forced alignment),
and recognisers: the words heard in audio, for the recognition check (`verify`).

Like the engines, aligners import no Celery, database or storage code.
"""

import difflib
from typing import Protocol

from core.audio import Audio
from core.hearing import Word, words_of

__all__ = ["Aligner", "Recognizer", "Word", "fill", "placed", "words_of"]

MIN_LETTER_SECONDS = 0.04  # a gap shorter than this per letter cannot hold the word
# At least this share of a text's words heard where it says them, in its order, and the
# recogniser's spans place the words: the alignment is not run (`placed`).
HEARD_PLACES = 0.9


class Aligner(Protocol):
    """Places the words of a text in its audio."""

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return each word of `text` (words_of) with its span, or None if it cannot."""
        ...


class Recognizer(Protocol):
    """Hears the words of audio: which of a text's words are said, in which order, and where."""

    def transcribe(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return the words heard (as words_of writes them) with their spans, or None if it
        cannot. A recogniser that hears no times (Qwen3-ASR) says so with a class attribute
        `heard_spans = False`: its words then count for the error rate, never to place words."""
        ...


def placed(words: list[str], heard: list[Word], samples: int, rate: int) -> list[Word] | None:
    """Place `words` (a segment's text, words_of) where a recogniser heard them, or None.

    The words heard in the text's order (the longest matching runs) take the spans they were
    heard at; the rest are shared out between them by letter count and marked estimated, as
    an aligner does with words outside its dictionary. None when under HEARD_PLACES of the
    words were heard in place: then the audio does not say the text well enough, and forced
    alignment (which places every word) is run instead. On bench.align's ground truth
    (`--heard`) the recogniser's spans were as close as the aligner's (sentence boundaries
    12-17 / 48-60 ms median / p95, forced alignment 26 / 58), so a job that verifies decodes
    each segment once.
    """
    if not words:
        return None
    out: list[Word | None] = [None] * len(words)
    matcher = difflib.SequenceMatcher(a=words, b=[w.word for w in heard], autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            span = heard[block.b + k]
            out[block.a + k] = Word(words[block.a + k], span.start, span.end)
    if sum(w is not None for w in out) < HEARD_PLACES * len(words):
        return None
    return fill(words, out, samples, rate)


def fill(words: list[str], spans: list[Word | None], samples: int, rate: int) -> list[Word]:
    """Place the words the aligner left out, by letter count, between their neighbours.

    Left out of the alignment text, a word's sound is usually taken by its neighbours; when
    the gap they leave is under MIN_LETTER_SECONDS per letter, the neighbours' spans are
    shared out with it (and marked estimated too).
    """
    out: list[Word | None] = list(spans)
    n = 0
    while n < len(words):
        if out[n] is not None:
            n += 1
            continue
        first, last = n, n
        while last < len(words) and out[last] is None:
            last += 1
        letters = sum(len(w) for w in words[first:last])
        before = out[first - 1] if first else None
        after = out[last] if last < len(words) else None
        begin = before.end if before is not None else 0
        finish = after.start if after is not None else samples
        if finish - begin < letters * MIN_LETTER_SECONDS * rate:
            if before is not None:
                first, begin = first - 1, before.start
            if after is not None:
                last, finish = last + 1, after.end
        span = words[first:last]
        total = sum(len(w) for w in span)
        at = float(begin)
        for k, w in enumerate(span, first):
            size = (finish - begin) * len(w) / total
            out[k] = Word(w, round(at), round(at + size), estimated=True)
            at += size
        n = last
    return [w for w in out if w is not None]
