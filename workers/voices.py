"""Uploaded voices: checking a reference clip, and loading it for a Base checkpoint."""

import uuid
from functools import lru_cache

import numpy as np

from workers.engines import Audio
from workers.engines.qwen3_tts import Reference

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MIN_SECONDS, MAX_SECONDS = 1.0, 30.0
SILENCE_RMS = 1e-3


class BadClip(ValueError):
    """The clip cannot be used as a reference; the message says why."""


def check_clip(data: bytes) -> tuple[Audio, int]:
    """Decode a clip and check it: audio, 1 to 30 seconds, not silent."""
    from workers.audio import decode

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


def voice_key(voice_id: uuid.UUID) -> str:
    """Return the storage key of a voice's reference clip."""
    return f"voices/{voice_id}/reference.flac"


@lru_cache(maxsize=256)
def load_reference(voice: str) -> Reference | None:
    """Load an uploaded voice (`voice_<hex>`) from the database and storage, or None."""
    import soundfile as sf

    from models import Voice
    from models.db import session_scope
    from storage import store_for

    try:
        voice_id = uuid.UUID(hex=voice.removeprefix("voice_"))
    except ValueError:
        return None
    with session_scope() as session:
        row = session.get(Voice, voice_id)
        if row is None:
            return None
        key, text = row.key, row.ref_text
    with store_for().open(key) as f:
        audio, rate = sf.read(f, dtype="float32")
    return Reference(samples=np.asarray(audio).reshape(-1).tolist(), sample_rate=int(rate),
                     text=text)
