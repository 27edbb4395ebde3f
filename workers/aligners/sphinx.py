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

import math
import tempfile
import threading
from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import soxr

from core.audio import Audio
from workers.aligners import Word, fill, words_of

RATE = 16000  # the acoustic model's sample rate


class SphinxAligner:
    """The CPU default aligner and recogniser (English).

    Recognition (the `verify` check) decodes in a decoder of its own against a bigram
    language model of the segment's own words. With the bundled general model it heard
    clean Piper segments with 31-69 % of words wrong ("the theory" for "the ferry"), and one
    missing two of its three sentences at 71 %: no margin between them. With the text's own
    words (bench.verify), clean segments came back at 0-10 %, those missing sentences at
    39-72 %, another segment's speech at 79-139 %. What it cannot hear is a word said as
    another word of the same text.
    """

    def __init__(self) -> None:
        self._decoder: Any = None
        self._recognizer: Any = None
        self._lock = threading.Lock()  # one utterance at a time (see above)

    def _built(self) -> Any:  # under the lock
        if self._decoder is None:
            from pocketsphinx import Decoder

            # cmn batch: normalise over the whole utterance, which is all here at once.
            self._decoder = Decoder(samprate=RATE, bestpath=False, cmn="batch",
                                    loglevel="FATAL")
        return self._decoder

    def transcribe(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return the words heard in `audio` against a language model of `text`'s own words
        (a bigram model, so any order and any subset can be heard), each with where it was
        heard in samples at `rate`, or None."""
        words = words_of(text)
        if not words or not len(audio):
            return None
        raw = _pcm16(audio, rate)
        with self._lock:
            lookup = self._built()  # the full dictionary, for pronunciations
            known = [w for w in words if lookup.lookup_word(w) is not None]
            if not known:
                return None
            recognizer = self._recognizer_built()
            for word in dict.fromkeys(known):  # only these words: the search builds in 1 ms
                if recognizer.lookup_word(word) is None:
                    recognizer.add_word(word, lookup.lookup_word(word), False)
            with tempfile.NamedTemporaryFile("w", suffix=".arpa") as model:
                model.write(_bigram_arpa(known))
                model.flush()
                try:
                    recognizer.add_lm_file("heard", model.name)
                    recognizer.activate_search("heard")
                    recognizer.reinit_feat()
                    recognizer.start_utt()
                    recognizer.process_raw(raw, full_utt=True)
                    recognizer.end_utt()
                    spans = [(s.word.split("(")[0], s.start_frame, s.end_frame + 1)
                             for s in recognizer.seg() if not s.word.startswith(("<", "["))]
                except RuntimeError:
                    return None
        scale = rate / 100  # frames (10 ms) to samples at the caller's rate
        return [Word(word, min(round(start * scale), len(audio)),
                     min(round(end * scale), len(audio))) for word, start, end in spans]

    def _recognizer_built(self) -> Any:  # under the lock
        if self._recognizer is None:
            from pocketsphinx import Decoder

            # A dictionary of one word, grown with each text's words: with the bundled full
            # dictionary loading a language model took 1.1 s here, with the text's, 1 ms.
            with tempfile.NamedTemporaryFile("w", suffix=".dict") as seed:
                seed.write("the DH AH\n")
                seed.flush()
                self._recognizer = Decoder(samprate=RATE, cmn="batch", dict=seed.name,
                                           loglevel="FATAL", **RECOGNIZER_OPTIONS)
        return self._recognizer

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return every word of `text` with its span in samples at `rate`, or None."""
        words = words_of(text)
        if not words or not len(audio):
            return None
        raw = _pcm16(audio, rate)
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
        return fill(words, out, len(audio), rate)



# PocketSphinx search options of the recogniser (bench.verify --option tries others): one
# pass (no fwdflat) over every second frame (ds 2). bench.verify, Piper segments of 2 and 3
# sentences: the same segments caught and none flagged wrongly as with the defaults, at 15 ms
# of CPU per audio second instead of 36-38 (ds 3: 11 ms, clean segments up to 0.13 WER).
RECOGNIZER_OPTIONS: dict[str, Any] = {"fwdflat": False, "ds": 2}

def _bigram_arpa(words: list[str]) -> str:
    """An ARPA bigram model of one text (its words' counts; a flat back-off to unigrams)."""
    seq = ["<s>", *words, "</s>"]
    unigrams, bigrams = Counter(seq), Counter(pairwise(seq))
    total = sum(unigrams.values())
    lines = ["\\data\\", f"ngram 1={len(unigrams)}", f"ngram 2={len(bigrams)}", "",
             "\\1-grams:"]
    lines += [f"{math.log10(c / total):.4f} {w} -0.3000" for w, c in unigrams.items()]
    lines += ["", "\\2-grams:"]
    lines += [f"{math.log10(c / unigrams[a]):.4f} {a} {b}" for (a, b), c in bigrams.items()]
    return "\n".join([*lines, "", "\\end\\", ""])


def _pcm16(audio: Audio, rate: int) -> bytes:
    """The acoustic model's input: 16-bit PCM at 16 kHz."""
    pcm = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE)
    return bytes((np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes())
