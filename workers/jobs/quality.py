"""The quality guard: catch runaway and truncated segments by their length.

Qwen3-TTS can miss its end token and run on; any engine can stop early. A segment's
expected length is its characters times the job's measured seconds per character (or an
engine default until enough of the job is done). A segment far outside that is synthesised
again with a new seed, a bounded number of times, and flagged in the manifest.
"""

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import structlog

from core import metrics, tracing
from workers.aligners import Word
from workers.engines import Audio, Engine, SpeechRequest

log = structlog.get_logger()

DEFAULT_SECONDS_PER_CHAR = {"piper": 0.06, "kokoro": 0.07, "vllm-omni": 0.07}
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


def guarded(engine: Engine, request: SpeechRequest, rate: float, retries: int,
             timed: bool = False
             ) -> tuple[Audio, list[Word] | None, int, dict[str, Any] | None]:
    """Synthesise; if the length is implausible, try again with new seeds (quality guard).

    Returns the audio, its words where `timed` and the engine places them as it speaks
    (Piper: workers/aligners/durations.py), how many times the engine ran, and the flag for
    the manifest.
    """
    speak = getattr(engine, "synthesize_words", None) if timed else None
    best: tuple[float, Audio, list[Word] | None] | None = None
    verdict = None
    for attempt in range(retries + 1):
        if attempt:
            request = replace(request, seed=(request.seed or 0) + attempt)
            metrics.segment_retakes.labels(engine.info.id,
                                           verdict.reason if verdict else "").inc()
        started = time.perf_counter()
        with tracing.span("engine.synthesize", model=engine.info.id, attempt=attempt,
                          characters=len(request.text)) as span:
            audio, words = speak([request])[0] if speak else (engine.synthesize([request])[0], None)
            span.set_attribute("audio_seconds", len(audio) / engine.sample_rate)
        metrics.observe_synthesis(engine.info.id, time.perf_counter() - started,
                                  len(audio) / engine.sample_rate, "job")
        verdict = check(len(request.text), len(audio) / engine.sample_rate, rate)
        if verdict is None:
            break
        miss = abs(math.log(max(verdict.seconds, 0.01) / max(verdict.expected_seconds, 0.01)))
        if best is None or miss < best[0]:
            best = (miss, audio, words)
    runs = attempt + 1
    if verdict is None and runs == 1:
        return audio, words, 1, None
    flag: dict[str, Any] = {"retries": runs - 1, "passed": verdict is None}
    if verdict is not None:
        assert best is not None
        _, audio, words = best  # nothing passed: keep the closest, and say so
        flag |= {"reason": verdict.reason, "expected_seconds": round(verdict.expected_seconds, 2),
                 "seconds": round(verdict.seconds, 2)}
    log.warning("segment.quality", request_id=request.request_id, **flag)
    return audio, words, runs, flag
