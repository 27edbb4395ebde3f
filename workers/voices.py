"""Uploaded voices for a Base checkpoint: reference clips read from the database and storage."""

from functools import lru_cache

import numpy as np

from core import ids
from workers.engines.qwen3_tts import Reference


@lru_cache(maxsize=256)
def load_reference(voice: str) -> Reference | None:
    """Load an uploaded voice (`voice_<hex>`) from the database and storage, or None."""
    import soundfile as sf

    from models import Voice
    from models.db import session_scope
    from storage import store_for

    try:
        voice_id = ids.parse(voice, ids.VOICE)
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
