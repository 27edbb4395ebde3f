"""Speech engines behind one small protocol (the worker builds one: workers/runtime/engine.py).

Engines import no Celery, database or storage code: reference clips come in as a callable.
"""

import concurrent.futures
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.audio import Audio
from core.catalog import ModelInfo

__all__ = ["Audio", "Engine", "SpeechRequest", "drain", "slots_for", "whole"]


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


def whole(chunks: Iterator[Audio]) -> Audio:
    """Join a request's streamed chunks into its whole audio (empty: no samples)."""
    pieces = list(chunks)
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)


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
