"""Hearing speech back: the words of a text, the words heard in audio, and how far apart.

The API hears a voice consent's recording against its statement (api/routes/consents.py)
and workers hear segments back (the `verify` check, workers/book/alignment.py), both with
PocketSphinx's bundled en-us model. Imports no database, broker or storage code.
"""

import math
import re
import tempfile
import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import soxr

from core.audio import Audio

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # each Chinese character is a word
_LETTER = rf"(?:(?![{_HAN}])[^\W_])"  # a letter or digit of any script but Han
_WORD = re.compile(rf"[{_HAN}]|{_LETTER}+(?:'{_LETTER}+)*")

@dataclass(frozen=True)
class Word:
    """One word of the spoken text and where it is, in samples of the aligned audio.

    `estimated`: the aligner could not place it (a word outside its dictionary), so its span
    is shared out from its aligned neighbours by letter count.
    """

    word: str
    start: int
    end: int
    estimated: bool = False


def words_of(text: str) -> list[str]:
    """Split spoken text into the words an aligner places: lower case, punctuation dropped.

    Words are runs of letters and digits of any script (an apostrophe inside one keeps it
    whole), and each Chinese character is a word of its own, as Qwen3-ForcedAligner's own
    segmentation has them; combining marks (Arabic vowel signs) are dropped, as it drops them.
    """
    text = unicodedata.normalize("NFC", text.lower().replace("\u2019", "'"))
    return _WORD.findall("".join(c for c in text if unicodedata.category(c) != "Mn"))


def word_error_rate(expected: list[str], heard: list[str]) -> float:
    """Word error rate of what was heard against the words that were to be said."""
    if not expected:
        return 0.0 if not heard else 1.0
    if not heard:
        return 1.0
    import jiwer

    return float(jiwer.wer(" ".join(expected), " ".join(heard)))


RATE = 16000  # the acoustic model's sample rate


class SphinxRecognizer:
    """The CPU recogniser (English): which of a text's words are said, in which order, where.

    It decodes in a decoder of its own against a bigram language model of the text's own
    words. With the bundled general model it heard clean Piper segments with 31-69 % of words
    wrong ("the theory" for "the ferry"), and one missing two of its three sentences at 71 %:
    no margin between them. With the text's own words (bench.verify), clean segments came
    back at 0-10 %, those missing sentences at 39-72 %, another segment's speech at
    79-139 %. What it cannot hear is a word said as another word of the same text.

    The binding holds the GIL while it decodes (2 threads took as long as 1), so one
    utterance at a time behind `lock`; the full-dictionary decoder (`_built`, which loads the
    model, about 0.4 s) gives pronunciations, and the forced aligner uses it too.
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
        raw = pcm16(audio, rate)
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
                    spans = decoded(recognizer, raw)
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


# PocketSphinx search options of the recogniser (bench.verify --option tries others): one
# pass (no fwdflat) over every second frame (ds 2). bench.verify, Piper segments of 2 and 3
# sentences: the same segments caught and none flagged wrongly as with the defaults, at 15 ms
# of CPU per audio second instead of 36-38 (ds 3: 11 ms, clean segments up to 0.13 WER).
RECOGNIZER_OPTIONS: dict[str, Any] = {"fwdflat": False, "ds": 2}

def decoded(decoder: Any, raw: bytes) -> list[tuple[str, int, int]]:
    """Decode one utterance from a fresh front end (the same answer whatever came before);
    return its words with their first and past-the-last frames (10 ms). RuntimeError when
    the decoder fails."""
    decoder.reinit_feat()
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
    return [(s.word.split("(")[0], s.start_frame, s.end_frame + 1)
            for s in decoder.seg() if not s.word.startswith(("<", "["))]


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


def pcm16(audio: Audio, rate: int) -> bytes:
    """The acoustic model's input: 16-bit PCM at 16 kHz."""
    pcm = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE)
    return bytes((np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes())
