"""Aligners: word start and end times for audio whose words are known (forced alignment),
and recognisers: the words heard in audio, for the recognition check (`verify`).

Like the engines, aligners import no Celery, database or storage code.
"""

import re
from dataclasses import dataclass
from typing import Protocol

from core.audio import Audio

__all__ = ["Aligner", "Recognizer", "Word", "words_of"]

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


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
    """Split spoken text into the words an aligner places: lower case, punctuation dropped."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


class Aligner(Protocol):
    """Places the words of a text in its audio."""

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return each word of `text` (words_of) with its span, or None if it cannot."""
        ...


class Recognizer(Protocol):
    """Hears the words of audio: which of a text's words are said, in which order."""

    def transcribe(self, audio: Audio, rate: int, text: str) -> list[str] | None:
        """Return the words heard (as words_of writes them), or None if it cannot."""
        ...
