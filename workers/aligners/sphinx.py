"""Forced alignment with PocketSphinx's bundled en-us acoustic model and dictionary.

`Decoder.set_align_text()` then `seg()` give word frames (10 ms). A decoder's front end
keeps state from one utterance to the next: without `reinit_feat()` before each, the same
clip aligned after different ones moved a boundary by 20 ms in 1-5 of 16 cases, and 8
threads with a decoder each disagreed with one thread in 21-40 of 160. The binding holds the
GIL while it decodes (2 threads took as long as 1), so threads gain nothing: one decoder
per aligner (building it loads the model, about 0.4 s) serves one utterance at a time
behind a lock, about 70 audio seconds per second per process (bench.align). Words outside
the dictionary are left out of the alignment and placed between their neighbours afterwards.
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
        self._decoder: Any = None
        self._lock = threading.Lock()  # one utterance at a time (see above)

    def _built(self) -> Any:  # under the lock
        if self._decoder is None:
            from pocketsphinx import Decoder

            # cmn batch: normalise over the whole utterance, which is all here at once.
            self._decoder = Decoder(samprate=RATE, bestpath=False, cmn="batch",
                                    loglevel="FATAL")
        return self._decoder

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return every word of `text` with its span in samples at `rate`, or None."""
        words = words_of(text)
        if not words or not len(audio):
            return None
        pcm = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE)
        raw = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
        with self._lock:
            decoder = self._built()
            placeable = [decoder.lookup_word(w) is not None for w in words]
            known = [w for w, ok in zip(words, placeable, strict=True) if ok]
            if not known:
                return None
            try:
                decoder.reinit_feat()  # the same answer whatever came before
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
        for word, ok in zip(words, placeable, strict=True):
            if not ok:
                out.append(None)
                continue
            _, start, end = next(placed)
            out.append(Word(word, min(round(start * scale), len(audio)),
                            min(round(end * scale), len(audio))))
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
