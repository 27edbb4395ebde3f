"""Uploaded voices: checking a reference clip and where it is stored (the API and workers)."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the API imports this module; numpy only loads when a clip is checked
    from core.audio import Audio

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MIN_SECONDS, MAX_SECONDS = 1.0, 30.0
SILENCE_RMS = 1e-3


class BadClip(ValueError):
    """The clip cannot be used as a reference; the message says why."""


def check_clip(data: bytes) -> "tuple[Audio, int]":
    """Decode a clip and check it: audio, 1 to 30 seconds, not silent."""
    import numpy as np

    from core.audio import decode

    try:
        audio, rate = decode(data)
    except Exception as exc:  # PyAV raises many kinds for data that is not audio
        raise BadClip(f"file: not an audio file that can be decoded ({exc.__class__.__name__})"
                      ) from exc
    seconds = len(audio) / rate if rate else 0.0
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise BadClip(f"file: the clip is {seconds:.1f} s long; a reference must be "
                      f"{MIN_SECONDS:.0f} to {MAX_SECONDS:.0f} s")
    if float(np.sqrt(np.mean(audio**2))) < SILENCE_RMS:
        raise BadClip("file: the clip is silent")
    return audio, rate
