"""Speech engines behind one small protocol; the worker picks one by NARRATOR_ENGINE."""

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


@lru_cache
def get_engine() -> Engine:
    """Load the configured engine once per process, lazily, on first use."""
    settings = get_settings()
    info = catalog(settings)[0]
    if info.engine == "piper":
        from workers.engines.piper import PiperEngine

        return PiperEngine(info, sentence_gap=settings.sentence_gap_seconds)
    if info.engine == "vllm-omni":
        from workers.engines.catalog import resolve_model_dir
        from workers.engines.qwen3_tts import Qwen3Config
        from workers.engines.vllm_omni import DEPLOY_DIR, VllmOmniEngine, cache_environment
        from workers.voices import load_reference

        cache_environment(settings.cache_dir)
        deploy = settings.vllm_deploy_config or str(DEPLOY_DIR / "qwen3_tts_narrator.yaml")
        return VllmOmniEngine(
            info, Qwen3Config.load(resolve_model_dir(settings.model)),
            max_in_flight=settings.vllm_max_in_flight, priority=settings.vllm_priority,
            references=load_reference,
            deploy_config="" if deploy == "default" else deploy,
            stage_init_timeout=settings.vllm_stage_init_timeout)
    raise ValueError(f"no engine for {info.engine!r}")
