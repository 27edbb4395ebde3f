"""Engine diagnostics read inside vLLM-Omni's stage processes (talker, Code2Wav).

The stage processes load none of the worker's settings: they inherit the worker's
environment and read this group themselves. WorkerSettings includes it, so the configuration
reference documents it with the rest. Read once per process (`tuning`); a test that changes
one of these variables clears the cache.
"""

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class EngineTuning(BaseSettings):
    """GPU engine diagnostics: for tracing and benchmarks, off in production."""

    # As models.settings.CONFIG (the stage processes import no database module).
    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore",
                                      use_attribute_docstrings=True)

    engine_trace: str = ""
    """A file: the GPU engine appends timestamps of each realtime request's path (submit,
    talker admission and frames, Code2Wav ready, step and output) and of every talker step,
    for `python -m bench.engine_trace`. Empty: off."""
    talker_admit_least: int = 1
    """Hold new batch segments at the talker until this many wait or the oldest has waited
    TALKER_ADMIT_WAIT_MS, so their prefills run in one step (a step that admits one costs
    about 3x a decode-only step); realtime requests are never held. 1: off (it did not raise
    the product's rate on an H100)."""
    talker_admit_wait_ms: float = 500.0
    """With TALKER_ADMIT_LEAST above 1: the longest a batch segment is held."""
    c2w_batch_tokens: int = 8192
    """Code2Wav tokens of batch segments admitted to one decode step (16 codebooks per frame:
    8192 is two 250-frame segments); for benchmarks of the cap."""


@lru_cache
def tuning() -> EngineTuning:
    """Return this process's engine tuning, read from the environment once."""
    return EngineTuning()
