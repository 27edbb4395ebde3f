"""Qwen3-TTS specifics that need no GPU: its config, request parameters and output shapes.

Facts follow vLLM-Omni 0.26's own speech server: the talker takes `additional_information`
lists (task_type, text, language, speaker, instruct, max_new_tokens, ref_audio, ref_text,
x_vector_only_mode); audio comes back as a tensor, a list of chunk tensors, or cumulative
snapshots, depending on async_chunk and the requested output kind.
"""

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.catalog import Qwen3Config
from workers.engines import Audio, SpeechRequest

DEFAULT_MAX_NEW_TOKENS = 2048
SAMPLES_PER_FRAME = 1920  # 12.5 frames a second at 24 kHz


@dataclass(frozen=True)
class Reference:
    """A reference clip for Base (voice clone) checkpoints: mono float samples and transcript."""

    samples: list[float]
    sample_rate: int
    text: str | None


def additional_information(config: Qwen3Config, request: SpeechRequest,
                           reference: Reference | None = None) -> dict[str, list[Any]]:
    """Build the talker's `additional_information` for one request, validated per task type."""
    task = request.task_type or config.task_type
    if task != config.task_type:
        raise ValueError(f"task_type {task!r} is not served by this checkpoint, which is "
                         f"{config.task_type}; one checkpoint serves one task type")
    info: dict[str, list[Any]] = {
        "task_type": [task],
        "text": [request.text],
        "language": [config.language(request.language)],
        "instruct": [request.instructions or ""],
        "max_new_tokens": [request.max_new_tokens or DEFAULT_MAX_NEW_TOKENS],
    }
    if task == "CustomVoice":
        if request.voice.lower() not in config.speakers:
            raise ValueError(f"voice {request.voice!r} is not a speaker of this checkpoint")
        info["speaker"] = [request.voice.lower()]
    elif task == "VoiceDesign":
        if not request.instructions:
            raise ValueError("VoiceDesign checkpoints need 'instructions' describing the voice")
    else:
        if reference is None:
            raise ValueError("Base checkpoints clone a voice: upload one with "
                             "POST /v1/audio/voices and use its id")
        info["ref_audio"] = [[reference.samples, reference.sample_rate]]
        if reference.text:
            info["ref_text"] = [reference.text]
            info["x_vector_only_mode"] = [False]
        else:
            info["x_vector_only_mode"] = [True]
    return info


class OutputKind(enum.Enum):
    """How the engine reports audio for a request (vLLM's RequestOutputKind)."""

    CUMULATIVE = 0  # every output holds all audio so far
    DELTA = 1  # every output holds only new audio
    FINAL_ONLY = 2  # one output, holding all the audio


def multimodal_output(output: Any) -> Any:
    """Return the multimodal payload of an OmniRequestOutput, wherever it is nested."""
    inner = getattr(output, "request_output", None)
    for candidate in inner if isinstance(inner, list) else [inner]:
        if candidate is None:
            continue
        for completion in getattr(candidate, "outputs", None) or []:
            payload = getattr(completion, "multimodal_output", None)
            if payload:
                return payload
        payload = getattr(candidate, "multimodal_output", None)
        if payload:
            return payload
    return getattr(output, "multimodal_output", None) or None


def to_samples(audio: Any) -> Audio:
    """Turn a tensor, an array or a list of chunks into one mono float32 array."""
    if audio is None:
        return np.zeros(0, dtype=np.float32)
    if isinstance(audio, list | tuple):
        parts = [to_samples(chunk) for chunk in audio if chunk is not None]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    if hasattr(audio, "detach"):  # a torch tensor, on any device
        audio = audio.detach().float().cpu().numpy()
    return np.asarray(audio, dtype=np.float32).reshape(-1)


class AudioCollector:
    """Per-request audio state: turns each engine output into the samples it adds."""

    def __init__(self, kind: OutputKind) -> None:
        self.kind = kind
        self.parts: list[Audio] = []
        self.samples = 0

    def add(self, output: Any) -> Audio:
        """Account for one engine output; return the samples that are new."""
        payload = multimodal_output(output)
        if not payload:
            return np.zeros(0, dtype=np.float32)
        audio = payload.get("audio")
        if audio is None:
            audio = payload.get("model_outputs")
        samples = to_samples(audio)
        if self.kind is OutputKind.DELTA:
            new = samples
        elif self.kind is OutputKind.CUMULATIVE:
            new = samples[self.samples :]
        else:  # FINAL_ONLY: the latest output is the whole audio
            self.parts, self.samples, new = [], 0, samples
        if len(new):
            self.parts.append(new)
            self.samples += len(new)
        return new

    def audio(self) -> Audio:
        """Return all the audio collected."""
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.float32)
