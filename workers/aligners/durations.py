"""Word times from an engine's own phoneme durations: no second decode of the audio.

Piper (VITS) decides how many samples each phoneme gets before it makes any sound, so where
each word of its output starts and ends is known exactly (to its 256-sample hop). What is not
known is which phonemes belong to which written word: espeak-ng joins some words into one
group ("on the" -> "ɔnðə"), keeps hyphenated ones whole and reads abbreviations its own way.
So each word is also phonemised alone, and that sequence is matched to what the engine said
(difflib, as `placed` matches heard words): a word takes the span of its matched phonemes.
Words with no match share out the gaps between their neighbours by letter count (`fill`);
under PLACED of the words matched, the caller falls back to forced alignment.
"""

import difflib
import unicodedata
from dataclasses import dataclass

from workers.aligners import Word, fill

# At least this share of the words matched to the engine's phonemes, or no words at all.
# Words said alone and in a sentence differ most in short ones ("a": "eɪ" alone, "ɐ" in a
# sentence), and `fill` gives those the gap their neighbours leave, where they were said.
PLACED = 0.75


@dataclass(frozen=True)
class Spoken:
    """One phoneme the engine said and its samples in the whole output: [start, end)."""

    phoneme: str
    start: int
    end: int


def from_durations(words: list[str], alone: list[list[str]], said: list[Spoken],
                   samples: int, rate: int) -> list[Word] | None:
    """Place `words` (words_of the text) on the phonemes the engine said, or None.

    `alone[k]` is words[k] phonemised by itself; `said` the engine's phonemes in order
    (word separators, punctuation and silences left out).
    """
    said = [s for s in said if not _mark(s.phoneme)]
    if not words or not said:
        return None
    owner = [k for k, phonemes in enumerate(alone) for p in phonemes if not _mark(p)]
    flat = [p for phonemes in alone for p in phonemes if not _mark(p)]
    matcher = difflib.SequenceMatcher(a=flat, b=[s.phoneme for s in said], autojunk=False)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            index = owner[block.a + k]
            first.setdefault(index, block.b + k)
            last[index] = block.b + k
    if len(first) < PLACED * len(words):
        return None
    spans: list[Word | None] = [None] * len(words)
    for k, word in enumerate(words):
        if k in first:
            spans[k] = Word(word, said[first[k]].start, said[last[k]].end)
    # Matching blocks run forward in both sequences, so the spans are in order already.
    return fill(words, spans, samples, rate)



def _mark(phoneme: str) -> bool:
    """Say whether a phoneme is only a mark on its neighbour (stress, length, palatal: "ˈ",
    "ː", "ʲ"): one matches anywhere, so marks are left out of the matching."""
    return all(unicodedata.category(c) in ("Lm", "Sk", "Mn") for c in phoneme)
