"""Qwen3-ASR on a GPU, through vLLM: the recognition check (`verify`) for GPU fleets.

Issue 18's GPU recogniser. vLLM 0.26 has the model (`Qwen3ASRForConditionalGeneration`, an
audio encoder before a Qwen3 decoder); here it runs in the process that checks segments, one
thread owning it and sending whatever segments are queued as one batch (aligners/qwen3.py's
OneThread, as the GPU aligner does).

The prompt is vLLM's own transcription prompt for the model (the audio in a user turn; the
assistant's answer starts "language <name><asr_text>"), with the language left for the model
to say: a segment spoken in the wrong language is then heard as such. What it hears is
turned into words as the segment's text is (`words_of`), for the word error rate. Qwen3-ASR
gives no word times, so the GPU aligner (or PocketSphinx) still places the words.

Timed on an H100 with random weights only (`bench.gpu_aligner --recognizer`): what it hears
is not measured, as no weights can be downloaded here.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from core.audio import Audio
from workers.aligners import Word, words_of
from workers.aligners.qwen3 import OneThread, _Call

PROMPT = ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n"
          "<|im_start|>assistant\n")
ANSWER = "<asr_text>"  # what the model writes after "language <name>", before the text


class Qwen3Recognizer(OneThread):
    """Hears segments on the GPU with Qwen3-ASR; `batch` segments at most per batch."""

    what = "Qwen3-ASR"
    heard_spans = False  # words without times: they never place a segment's words

    def __init__(self, model: str, *, memory: float = 0.2, batch: int = 32,
                 load_format: str = "auto", max_model_len: int = 4096) -> None:
        super().__init__(model, memory=memory, batch=batch, load_format=load_format,
                         max_model_len=max_model_len)

    def transcribe(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return the words heard (without times), or None (workers.aligners.Recognizer)."""
        if len(audio) == 0:
            return None
        return self._call(_Call(np.asarray(audio, np.float32), rate, words_of(text)))

    def _load(self) -> Any:
        return _AsrModel(self.model, self._options)

    def _run(self, model: Any, calls: list[_Call]) -> list[list[Word] | None]:
        return [heard(text) for text in model.transcribe(calls)]


def heard(answer: str) -> list[Word]:
    """The words of the model's answer ("language English<asr_text>The text."), untimed."""
    text = answer.rsplit(ANSWER, 1)[-1]
    return [Word(word, 0, 0, estimated=True) for word in words_of(text)]


def tokens_for(words: list[str]) -> int:
    """The most tokens a segment's answer may take: its words three times over (a runaway
    take says more than its text), and the language prefix."""
    return 16 + 3 * max(len(words), 4)


class _AsrModel:
    """The generating model (on the recogniser's thread)."""

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        from vllm import LLM

        self.llm = LLM(model=path, trust_remote_code=True, dtype="bfloat16",
                       hf_overrides={"architectures": ["Qwen3ASRForConditionalGeneration"]},
                       **options)
        # soxr to the feature extractor's rate, as for the aligner (vLLM would use PyAV).
        self.rate = int(json.loads((Path(path) / "preprocessor_config.json").read_text())
                        .get("sampling_rate", 16000))

    def transcribe(self, calls: list[_Call]) -> list[str]:
        from vllm import SamplingParams

        outputs = self.llm.generate(
            [{"prompt": PROMPT, "multi_modal_data": {"audio": (
                soxr.resample(call.audio, call.rate, self.rate), self.rate)}}
             for call in calls],
            [SamplingParams(temperature=0.0, max_tokens=tokens_for(call.words))
             for call in calls], use_tqdm=False)
        return [out.outputs[0].text for out in outputs]
