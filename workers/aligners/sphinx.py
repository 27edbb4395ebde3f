"""Forced alignment with PocketSphinx's bundled en-us acoustic model and dictionary.

`Decoder.set_align_text()` then `seg()` give word frames (10 ms). A decoder holds the state
of one utterance, so each thread gets its own (building one takes about 0.4 s, loading the
model); words outside the dictionary are left out of the alignment and placed between their
neighbours afterwards.
"""

import threading
from typing import Any

import numpy as np
import soxr

from core.audio import Audio
from workers.aligners import Word, words_of

RATE = 16000  # the acoustic model's sample rate
MIN_LETTER_SECONDS = 0.04  # a gap shorter than this per letter cannot hold the word


class SphinxAligner:
    """The CPU default aligner (English)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _decoder(self) -> Any:
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            from pocketsphinx import Decoder

            decoder = self._local.decoder = Decoder(samprate=RATE, bestpath=False,
                                                    loglevel="FATAL")
        return decoder

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return every word of `text` with its span in samples at `rate`, or None."""
        words = words_of(text)
        if not words or not len(audio):
            return None
        decoder = self._decoder()
        known = [w for w in words if decoder.lookup_word(w) is not None]
        if not known:
            return None
        pcm = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE)
        raw = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
        try:
            decoder.set_align_text(" ".join(known))
            decoder.start_utt()
            decoder.process_raw(raw, full_utt=True)
            decoder.end_utt()
            spans = [(s.word.split("(")[0], s.start_frame, s.end_frame + 1)
                     for s in decoder.seg() if not s.word.startswith(("<", "["))]
        except RuntimeError:
            return None
        if [w for w, _, _ in spans] != known:
            return None
        scale = rate / 100  # frames to samples at the caller's rate
        placed = iter(spans)
        out: list[Word | None] = []
        for word in words:
            if decoder.lookup_word(word) is None:
                out.append(None)
                continue
            _, start, end = next(placed)
            out.append(Word(word, round(start * scale), round(end * scale)))
        return _fill(words, out, len(audio), rate)


def _fill(words: list[str], placed: list[Word | None], samples: int,
          rate: int = RATE) -> list[Word]:
    """Place the words the aligner left out, by letter count, between their neighbours.

    Left out of the alignment text, a word's sound is usually taken by its neighbours; when
    the gap they leave is under MIN_LETTER_SECONDS per letter, the neighbours' spans are
    shared out with it (and marked estimated too).
    """
    out: list[Word | None] = list(placed)
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
