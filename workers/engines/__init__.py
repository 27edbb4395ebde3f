"""Speech engines behind one small protocol; the worker picks one by NARRATOR_ENGINE."""

import concurrent.futures
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
import numpy.typing as npt

from workers.engines.catalog import ModelInfo, catalog
from workers.settings import get_settings

Audio = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SpeechRequest:
    """One piece of text to speak, with the API's optional fields."""

    text: str
    voice: str
    speed: float = 1.0
    instructions: str | None = None
    language: str | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    task_type: str | None = None
    request_id: str = ""
    realtime: bool = False


class Engine(Protocol):
    """A loaded model: mono float32 audio in [-1, 1] at `sample_rate`."""

    info: ModelInfo

    @property
    def sample_rate(self) -> int: ...

    def start(self) -> None: ...

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]: ...

    def stream(self, request: SpeechRequest) -> Iterator[Audio]: ...


def drain(future: "concurrent.futures.Future[Audio]", chunks: "queue.SimpleQueue[Audio]"
          ) -> Iterator[Audio]:
    """Yield the chunks an engine call puts on `chunks` until its future is done."""
    while True:
        try:
            yield chunks.get(timeout=0.01)
        except queue.Empty:
            if future.done():
                while not chunks.empty():
                    yield chunks.get()
                future.result()  # raise the engine's error, if any
                return


class _Unbounded:
    """A semaphore that never waits (realtime requests: the lane's threads bound them)."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to release."""


_UNBOUNDED = _Unbounded()


def slots_for(request: SpeechRequest,
               batch: threading.BoundedSemaphore) -> "threading.BoundedSemaphore | _Unbounded":
    """Return the bound a request waits on: batch requests share VLLM_MAX_IN_FLIGHT slots
    (GPU memory); realtime ones never wait behind them (the lane's threads bound them, and
    the deploy config keeps that many sequences of headroom)."""
    return _UNBOUNDED if request.realtime else batch


_LOADING = threading.Lock()


def get_engine() -> Engine:
    """Return the process's engine, loading it on first use.

    One thread loads it while the others wait: lru_cache alone would let two threads that
    ask at once each build an engine (two vLLM-Omni engines on one GPU).
    """
    with _LOADING:
        return _load()


def loaded_engine() -> Engine | None:
    """Return the engine if it has been loaded, else None (never loads it)."""
    with _LOADING:
        return _load() if _load.cache_info().currsize else None


def reset_engine() -> None:
    """Forget the loaded engine (tests and benchmarks that change the settings)."""
    with _LOADING:
        _load.cache_clear()


@lru_cache
def _load() -> Engine:
    settings = get_settings()
    info = catalog(settings)[0]
    if info.engine == "piper":
        from workers.engines.piper import PiperEngine

        return PiperEngine(info, sentence_gap=settings.sentence_gap_seconds)
    if info.engine == "vllm-omni":
        from workers.engines.vllm_omni import from_settings

        if not settings.vllm_engine_process:
            return from_settings()
        from workers.engines.catalog import resolve_model_dir
        from workers.engines.engine_process import EngineProcess
        from workers.engines.qwen3_tts import Qwen3Config
        from workers.voices import load_reference

        config = Qwen3Config.load(resolve_model_dir(settings.model))
        return EngineProcess(info, from_settings, sample_rate=config.sample_rate,
                             max_in_flight=settings.vllm_max_in_flight,
                             references=load_reference if config.task_type == "Base" else None,
                             start_timeout=settings.vllm_stage_init_timeout * 2)
    raise ValueError(f"no engine for {info.engine!r}")
