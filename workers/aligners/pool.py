"""An aligner that runs in child processes, as many utterances at once as it has processes.

PocketSphinx holds the GIL while it decodes, so one process aligns one utterance at a time,
about 70 audio-seconds per second (bench.align), below what one GPU worker synthesises. The
pool gives each of its processes an aligner of its own (built there, once) and hands each
request to a free one; the calling threads wait without the GIL. A pool whose process died
is rebuilt on the next request (the one that saw it die gets the error, and its segment
keeps the estimate).
"""

import importlib
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from core.audio import Audio
from workers.aligners import Aligner, Recognizer, Word

_CHILD: Any = None  # the aligner (and recogniser) of a pool process


def _start(factory: str) -> None:
    global _CHILD
    module, name = factory.split(":")
    _CHILD = getattr(importlib.import_module(module), name)()


def _align(audio: Audio, rate: int, text: str) -> list[Word] | None:
    assert _CHILD is not None, "not a pool process"
    aligner: Aligner = _CHILD
    return aligner.align(audio, rate, text)


def _transcribe(audio: Audio, rate: int, text: str) -> list[Word] | None:
    assert _CHILD is not None, "not a pool process"
    recognizer: Recognizer = _CHILD
    return recognizer.transcribe(audio, rate, text)


class PooledAligner:
    """`processes` aligners made by `factory` ("module:Class"), each in a process of its own."""

    def __init__(self, processes: int,
                 factory: str = "workers.aligners.sphinx:SphinxAligner") -> None:
        self.processes = max(1, processes)
        self._factory = factory
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start, initargs=(self._factory,))
            return self._pool

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Align in a free pool process (see workers.aligners.Aligner)."""
        words: list[Word] | None = self._run(_align, np.asarray(audio, np.float32), rate, text)
        return words

    def transcribe(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Recognise in a free pool process (see workers.aligners.Recognizer)."""
        heard: list[Word] | None = self._run(_transcribe, np.asarray(audio, np.float32), rate,
                                            text)
        return heard

    def _run(self, call: Any, *args: Any) -> Any:
        pool = self._executor()
        try:
            return pool.submit(call, *args).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            raise

    def close(self) -> None:
        """Stop the pool's processes (they are started again on the next request)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)
