"""Qwen3-ForcedAligner on a GPU, through vLLM: word times from a model, for GPU fleets.

Issue 18's second aligner. vLLM-Omni 0.26 serves this model only behind its speech
WebSocket, one request at a time under a lock (`vllm_omni/utils/forced_aligner.py`). Here it
is vLLM's pooling model (`Qwen3ASRForcedAlignerForTokenClassification`, token
classification) in the process that aligns, and the segments that arrive together go to the
GPU as one batch: one thread owns the model and takes whatever is queued, up to `batch`.

The prompt is the official aligner's (Qwen's `qwen_asr` processor): the audio, then each
word followed by a start and an end `<timestamp>` marker, with no chat template around it
(`prompt`). vLLM-Omni 0.26 wraps it in a user turn, and the three tokens before the audio put
the markers one or two 80 ms bins late, 92 ms on average on real speech with the released
weights (vLLM-Omni pull request 7240, fixed after 0.26). The marker's token and the repair of
out-of-order bins are vLLM-Omni's (`vllm_omni.utils.qwen3_force_align_processor`). Each
marker is classified into a time bin
(`timestamp_segment_time`, 80 ms in the released checkpoint's config); Narrator turns the
pairs into spans in samples, in order and inside the audio.

The words are Narrator's own (`words_of`), so the cues map back to the written text as with
PocketSphinx. Timed on an H100 with random weights only (`bench.gpu_aligner`): where it puts
words is not measured, as no weights can be downloaded here.
"""

import concurrent.futures
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr
import structlog

from core.audio import Audio
from workers.aligners import Word, words_of

log = structlog.get_logger()
Repair = Callable[[list[int]], list[int]]
AUDIO = "<|audio_start|><|audio_pad|><|audio_end|>"  # the processor expands the pad
MARKERS = "<timestamp><timestamp>"  # a word's start and end


def prompt(words: Sequence[str]) -> str:
    """Return the aligner's input for `words`: the audio, then every word and its two markers,
    as the official aligner feeds its tokenizer (no chat template)."""
    return AUDIO + "".join(word + MARKERS for word in words)


@dataclass
class _Call:
    audio: Audio
    rate: int
    words: list[str]
    future: concurrent.futures.Future[list[Word] | None] = field(
        default_factory=concurrent.futures.Future)


class OneThread(ABC):
    """A vLLM model that one thread loads and owns: calls from any thread queue up, and the
    thread sends whatever is queued, up to `batch`, as one batch (the GPU's work per step,
    not Python's per call). Subclasses load the model and run a batch."""

    what = "the model"

    def __init__(self, model: str, *, memory: float, batch: int, load_format: str,
                 max_model_len: int) -> None:
        self.model = model
        self.processes = batch  # what checks_for runs at once (workers/book/alignment.py)
        self._options = {"gpu_memory_utilization": memory, "load_format": load_format,
                         "max_model_len": max_model_len}
        self._batch = batch
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._failed: BaseException | None = None

    def _call(self, call: _Call) -> list[Word] | None:
        self.start()
        self._calls.put(call)
        return call.future.result()

    def start(self, timeout: float | None = None) -> None:
        """Load the model on its thread, once; wait until it is loaded."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name=type(self).__name__.lower())
                self._thread.start()
        self._loaded.wait(timeout)
        if self._failed is not None:
            raise RuntimeError(f"{self.what} did not load: {self._failed!r}")

    @abstractmethod
    def _load(self) -> Any:
        """Load the model (on its thread)."""

    @abstractmethod
    def _run(self, model: Any, calls: list[_Call]) -> list[list[Word] | None]:
        """Run one batch; a result per call, in order."""

    def _serve(self) -> None:
        try:
            model = self._load()
        except BaseException as error:  # every call raises it
            log.error("gpu_model.load_failed", model=self.model, what=self.what,
                      error=repr(error))
            self._failed = error
            self._loaded.set()
            return
        self._loaded.set()
        while True:
            calls = [self._calls.get()]
            while len(calls) < self._batch:
                try:
                    calls.append(self._calls.get_nowait())
                except queue.Empty:
                    break
            try:
                found = self._run(model, calls)
            except Exception as error:  # those segments keep the estimate, or go unheard
                log.warning("gpu_model.batch_failed", what=self.what, segments=len(calls),
                            error=repr(error))
                found = [None] * len(calls)
            for call, words in zip(calls, found, strict=True):
                call.future.set_result(words)


class Qwen3Aligner(OneThread):
    """Aligns on the GPU with Qwen3-ForcedAligner; `batch` segments at most per forward."""

    what = "Qwen3-ForcedAligner"

    def __init__(self, model: str, *, memory: float = 0.3, batch: int = 32,
                 load_format: str = "auto", max_model_len: int = 4096) -> None:
        super().__init__(model, memory=memory, batch=batch, load_format=load_format,
                         max_model_len=max_model_len)

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return each word of `text` with its span, or None (see workers.aligners.Aligner)."""
        words = words_of(text)
        if not words or len(audio) == 0:
            return None
        return self._call(_Call(np.asarray(audio, np.float32), rate, words))

    def _load(self) -> Any:
        return _Model(self.model, self._options)

    def _run(self, model: Any, calls: list[_Call]) -> list[list[Word] | None]:
        found: list[list[Word] | None] = model.align(calls)
        return found


class _Model:
    """The pooling model and what decoding its output needs (on the aligner's thread)."""

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        import json
        import os
        from pathlib import Path

        from vllm import LLM
        from vllm_omni.utils import qwen3_force_align_processor as processor

        # In-process engine: vLLM-Omni found the token-classification output does not cross
        # the engine-core IPC of this vLLM (forced_aligner.py), and sets the same.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm = LLM(model=path, runner="pooling", trust_remote_code=True, dtype="bfloat16",
                       hf_overrides={"architectures": [
                           "Qwen3ASRForcedAlignerForTokenClassification"]}, **options)
        config = self.llm.llm_engine.model_config.hf_config
        self.bin_ms = float(config.timestamp_segment_time)
        self.marker = processor.resolve_timestamp_token_id(self.llm.get_tokenizer())
        self.processor = processor
        # The audio goes in at the feature extractor's rate, resampled here with soxr: vLLM
        # resamples with PyAV, which a GPU worker need not have.
        self.rate = int(json.loads((Path(path) / "preprocessor_config.json").read_text())
                        .get("sampling_rate", 16000))

    def align(self, calls: Sequence[_Call],
              build: Callable[[Sequence[str]], str] = prompt) -> list[list[Word] | None]:
        """Align each call's words (`build` makes the text part of the input; bench.gpu_aligner
        --shift compares vLLM-Omni's with `prompt`)."""
        from vllm.pooling_params import PoolingParams

        outputs = self.llm.encode(
            [{"prompt": build(call.words),
              "multi_modal_data": {"audio": (soxr.resample(call.audio, call.rate, self.rate),
                                             self.rate)}} for call in calls],
            pooling_params=PoolingParams(), pooling_task="token_classify", use_tqdm=False)
        return [spans(out.outputs.data, list(out.prompt_token_ids), self.marker, self.bin_ms,
                      call.words, len(call.audio), call.rate, self.processor.fix_timestamp)
                for call, out in zip(calls, outputs, strict=True)]


def spans(logits: Any, token_ids: list[int], marker: int, bin_ms: float, words: list[str],
          samples: int, rate: int, repair: Repair) -> list[Word] | None:
    """Words with spans from the aligner's marker classes, or None if the markers do not
    pair with the words (two per word). Spans are kept in order, inside the audio."""
    at = [i for i, token in enumerate(token_ids) if token == marker]
    if len(at) != 2 * len(words):
        return None
    scores = logits.float().cpu().numpy() if hasattr(logits, "cpu") else np.asarray(logits)
    marks = repair([round(int(b) * bin_ms) for b in scores[at].argmax(axis=-1)])
    end_ms = samples * 1000 / rate
    out, previous = [], 0.0
    for n, word in enumerate(words):
        start = min(max(float(marks[2 * n]), previous), end_ms)
        end = min(max(float(marks[2 * n + 1]), start), end_ms)
        out.append(Word(word, round(start * rate / 1000), round(end * rate / 1000)))
        previous = end
    return out
