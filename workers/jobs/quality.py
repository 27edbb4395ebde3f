"""The quality guard: catch runaway and truncated segments by their length.

Qwen3-TTS can miss its end token and run on; any engine can stop early. A segment's
expected length is its characters times the job's measured seconds per character (or an
engine default until enough of the job is done). A segment far outside that is synthesised
again with a new seed, a bounded number of times, and flagged in the manifest.
"""

from dataclasses import dataclass

DEFAULT_SECONDS_PER_CHAR = {"piper": 0.06, "vllm-omni": 0.07}
MIN_CALIBRATION_CHARS = 500
RUNAWAY_RATIO, RUNAWAY_SLACK_SECONDS = 3.0, 6.0
TRUNCATED_RATIO, MIN_CHARS_FOR_TRUNCATION = 0.3, 40


@dataclass(frozen=True)
class Verdict:
    """Why a segment's length is wrong, and how wrong."""

    reason: str  # runaway | truncated
    expected_seconds: float
    seconds: float


def seconds_per_char(engine: str, audio_seconds: float, chars_done: int, speed: float) -> float:
    """Return the job's measured rate once it has enough data, else the engine default."""
    if chars_done >= MIN_CALIBRATION_CHARS and audio_seconds > 0:
        return audio_seconds / chars_done
    return DEFAULT_SECONDS_PER_CHAR.get(engine, 0.07) / speed


def check(chars: int, seconds: float, rate: float) -> Verdict | None:
    """Return a verdict if `seconds` of audio is implausible for `chars` characters."""
    expected = chars * rate
    if seconds > expected * RUNAWAY_RATIO + RUNAWAY_SLACK_SECONDS:
        return Verdict("runaway", expected, seconds)
    if chars >= MIN_CHARS_FOR_TRUNCATION and seconds < expected * TRUNCATED_RATIO:
        return Verdict("truncated", expected, seconds)
    return None
