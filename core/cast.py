"""Who speaks each segment: the chapter's voice, or a `[voice:name]` mark's speaker's.

At submit the API resolves every voice a job names, so the job's options hold `cast`
(each speaker's name in lower case to `{"name": as written, "voice": a voice id}`: the job's
own cast and any voice a mark names directly) and `chapter_voices` (chapter index, as a
string, to a voice id).
"""

from collections.abc import Mapping
from typing import Any


def voice_for(options: Mapping[str, Any], default: str, chapter: int,
              speaker: str | None, overrides: Mapping[str, Any] | None = None) -> str:
    """Return the voice of a segment of `chapter` spoken by `speaker` (None: the narrator);
    a re-render's `overrides` come first."""
    if overrides and overrides.get("voice"):
        return str(overrides["voice"])
    if speaker is not None:
        return str(options.get("cast", {}).get(speaker, {}).get("voice", default))
    return str(options.get("chapter_voices", {}).get(str(chapter), default))
