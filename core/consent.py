"""Voice consents: the statement a speaker reads aloud, and hearing it back in a recording.

A voice clone needs a consent (api/routes/consents.py): a recording of the speaker reading
STATEMENT, heard back by the recogniser (core/hearing.py) against it. Only English can be
heard here (PocketSphinx's bundled en-us model); the recogniser cannot tell one speaker from
another, so the recording is kept for a person to compare with the voice's reference clip.
"""

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.voices import BadClip, check_clip

if TYPE_CHECKING:
    from core.audio import Audio
    from core.hearing import SphinxRecognizer

STATEMENT = ("I consent to recordings of my voice being used to create a synthetic version "
             "of my voice.")
LANGUAGES = ("en",)  # the primary language subtags whose statement can be heard
# bench.consent: the statement read by each of the six CPU voices came back with 0-0.24 of
# its words wrong; other sentences of its length, one made of its own words, 0.53 or more.
MAX_WORD_ERROR = 0.35

_recognizer: "SphinxRecognizer | None" = None
_recognizer_lock = threading.Lock()


class NotHeard(ValueError):
    """The recording does not say the statement; the message says what was heard."""


@dataclass(frozen=True)
class Heard:
    """What the recogniser heard in a consent recording."""

    audio: "Audio"
    rate: int
    transcript: str
    word_error_rate: float


def primary(language: str) -> str:
    """The primary subtag of a BCP 47 tag (`en-US` → `en`)."""
    return language.strip().split("-")[0].split("_")[0].lower()


def hear(data: bytes) -> Heard:
    """Decode a consent recording and hear it against STATEMENT (CPU: run it in a thread).

    Raises BadClip for audio that cannot be a recording (core.voices.check_clip), NotHeard
    when the statement is not what it says."""
    from core.hearing import word_error_rate, words_of

    audio, rate = check_clip(data)
    heard = _shared().transcribe(audio, rate, STATEMENT) or []
    said = [w.word for w in heard]
    error = word_error_rate(words_of(STATEMENT), said)
    transcript = " ".join(said)
    if error > MAX_WORD_ERROR:
        raise NotHeard(f"recording: the consent statement was not heard (heard "
                       f"\"{transcript or 'nothing'}\", {error:.0%} of its words wrong); the "
                       f"speaker must read: \"{STATEMENT}\"")
    return Heard(audio, rate, transcript, error)


def _shared() -> "SphinxRecognizer":
    """One recogniser per process (building it loads the model); it decodes one at a time."""
    global _recognizer
    with _recognizer_lock:
        if _recognizer is None:
            from core.hearing import SphinxRecognizer

            _recognizer = SphinxRecognizer()
        return _recognizer


__all__ = ["LANGUAGES", "MAX_WORD_ERROR", "STATEMENT", "BadClip", "Heard", "NotHeard", "hear",
           "primary"]
