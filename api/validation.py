"""Checks that need the catalogue or the settings: model, voice, extras, text limits."""

from api.errors import bad_request, unavailable
from api.schemas import SpeechFields
from core.catalog import ModelInfo, VoiceInfo, speaks
from core.text import clean, japanese, speakable, strip_pauses

RAW_FACTOR = 4  # a text longer than this times its limit is refused before it is cleaned


def resolve(fields: SpeechFields, models: tuple[ModelInfo, ...],
            uploaded: list[VoiceInfo] | None = None) -> tuple[ModelInfo, VoiceInfo]:
    """Return the model and voice a request names, or raise a 400 that lists what exists."""
    if not models:
        raise unavailable("no model is available yet: no worker has registered one", 10)
    if fields.model is None:  # none, or OpenAI's names: the first model that has the voice
        wanted = fields.voice_id
        model = next((m for m in models if wanted and m.voice(wanted)), models[0])
    else:
        found = next((m for m in models if m.id == fields.model), None)
        if found is None:
            listed = ", ".join(m.id for m in models)
            raise bad_request(f"model: unknown model '{fields.model}'; available: {listed}",
                              "model", "model_not_found")
        model = found
    own = [v for v in uploaded or [] if v.model == model.id]
    usable = [v for v in own if not v.disabled]
    if not fields.voice_id and not model.voices and not usable:
        raise bad_request(f"voice: model '{model.id}' clones voices: upload one with "
                          "POST /v1/audio/voices", "voice", "voice_not_found")
    voice_id = fields.voice_id or (model.voices or tuple(usable))[0].id
    voice = find_voice(model, own, voice_id)
    if voice is None:
        listed = ", ".join(v.id for v in (*model.voices, *own))
        raise bad_request(f"voice: unknown voice '{voice_id}' for model '{model.id}'; "
                          f"available: {listed} (see GET /v1/audio/voices)",
                          "voice", "voice_not_found")
    for name in fields.extras():
        if name != "instructions" and name not in model.extras:
            raise bad_request(f"{name}: not supported by model '{model.id}'", name,
                              "unsupported_parameter")
    if fields.language and not speaks(voice.languages, fields.language):
        raise bad_request(f"language: '{fields.language}' is not spoken by voice "
                          f"'{voice.id}'; it speaks {', '.join(voice.languages)}",
                          "language", "unsupported_language")
    return model, voice


def check_script(model: ModelInfo, text: str, language: str | None) -> None:
    """A 400 for Japanese text (kana or kanji, no `language` given) to a Kokoro worker that
    cannot read it (its Japanese reader is the `japanese` extra): the engine would fail."""
    if (model.engine == "kokoro" and not language and not speaks(model.languages, "ja")
            and japanese(text)):
        raise bad_request("input: Japanese text needs Kokoro's Japanese reader, which the "
                          "Kokoro workers here lack (install narrator[japanese] there)",
                          "input", "unsupported_language")


def find_voice(model: ModelInfo, own: list[VoiceInfo], voice_id: str) -> VoiceInfo | None:
    """Return the model's voice (case-insensitive) or the owner's uploaded one of that id; a
    400 for an uploaded voice whose consent is gone."""
    found = model.voice(voice_id) or next((v for v in own if v.id == voice_id
                                           and v.model == model.id), None)
    if found is not None and found.disabled:
        raise bad_request(f"voice: '{voice_id}' is disabled: its consent was deleted (or it "
                          "was uploaded before consents); upload it again with a consent "
                          "(POST /v1/audio/voice_consents)", "voice", "voice_disabled")
    return found


def text_field(text: str, param: str, limit: int, hint: str = "") -> str:
    """Clean `text` and check it is speakable and within `limit` characters (its raw length
    first: cleaning drops characters, but never takes a text to a quarter of its length
    unless most of it is control characters)."""
    if not text.strip():
        raise bad_request(f"{param}: must not be empty", param, "empty_input")
    if len(text) > RAW_FACTOR * limit:
        raise bad_request(f"{param}: {len(text)} characters is over the limit of {limit}"
                          + (f"; {hint}" if hint else ""), param, "input_too_long")
    cleaned = clean(text).strip()
    if not speakable(strip_pauses(cleaned)):
        raise bad_request(f"{param}: has nothing to speak (only control characters, "
                          "punctuation or whitespace)", param, "empty_input")
    if len(cleaned) > limit:
        raise bad_request(f"{param}: {len(cleaned)} characters is over the limit of {limit}"
                          + (f"; {hint}" if hint else ""), param, "input_too_long")
    return cleaned
