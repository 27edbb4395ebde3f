"""Uploaded voices for a Base checkpoint: reference clips read from the database and storage."""

from functools import lru_cache

import numpy as np

from core import ids
from workers.engines.qwen3_tts import Reference


def load_reference(voice: str) -> Reference | None:
    """Load an uploaded voice (`voice_<hex>`) from the database and storage, or None.

    Its row is read on every call, so a voice whose consent is deleted stops at its next
    segment (ValueError, which fails the segment); the clip itself is cached."""
    from models import Voice
    from models.db import session_scope

    try:
        voice_id = ids.parse(voice, ids.VOICE)
    except ValueError:
        return None
    with session_scope() as session:
        row = session.get(Voice, voice_id)
        if row is None:
            return None
        if row.consent_id is None:
            raise ValueError(f"voice {voice!r} is disabled: its consent was deleted")
        key, text = row.key, row.ref_text
    samples, rate = _clip(key)
    return Reference(samples=samples, sample_rate=rate, text=text)


@lru_cache(maxsize=256)
def _clip(key: str) -> tuple[list[float], int]:
    import soundfile as sf

    from storage import store_for

    with store_for().open(key) as f:
        audio, rate = sf.read(f, dtype="float32")
    return np.asarray(audio).reshape(-1).tolist(), int(rate)
