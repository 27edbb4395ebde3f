"""The voice library: upload a reference clip (Base checkpoints clone it) under a speaker's
recorded consent (api/routes/consents.py), delete it; GET /v1/audio/voices lists them."""

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, File, Form, UploadFile
from sqlalchemy import delete

from api.errors import ApiError, bad_request, not_found
from api.owned import owned_consent, voice_public_id
from api.state import OwnerDep, SessionDep, StateDep
from core import ids
from core.catalog import ModelInfo
from core.keys import voice_key
from core.voices import MAX_UPLOAD_BYTES, BadClip, check_clip
from models import Voice, utcnow, uuid7

router = APIRouter()


def _object(voice: Voice, model: ModelInfo | None) -> dict[str, Any]:
    return {"id": voice_public_id(voice), "object": "audio.voice", "name": voice.name,
            "model": voice.model, "languages": list(model.languages) if model else [],
            "kind": "uploaded", "ref_text": voice.ref_text,
            "consent": ids.consent_id(voice.consent_id) if voice.consent_id else None,
            "disabled": voice.consent_id is None,
            "duration_seconds": round(voice.duration_seconds, 3),
            "created_at": int(voice.created_at.timestamp())}


@router.post("/v1/audio/voices", status_code=201)
async def upload_voice(
    state: StateDep, session: SessionDep, owner: OwnerDep,
    name: Annotated[str, Form(min_length=1, max_length=128, description="the voice's name")],
    consent: Annotated[str, Form(description="the speaker's consent: an id from "
                                 "POST /v1/audio/voice_consents")],
    audio_sample: Annotated[UploadFile | None, File(
        description="reference clip, 1-30 s, at most 10 MB")] = None,
    file: Annotated[UploadFile | None, File(description="the same, by its older name")] = None,
    ref_text: Annotated[str | None, Form(
        max_length=2000, description="what the clip says (models that use it)")] = None,
    model: Annotated[str | None, Form(
        description="the model the voice is for; empty: the first that clones")] = None,
) -> dict[str, Any]:
    """Store a reference clip where every worker can read it, under the speaker's consent."""
    sample = audio_sample or file
    if sample is None:
        raise bad_request("audio_sample: the reference clip is required", "audio_sample",
                          "invalid_value")
    if not consent.strip():
        raise bad_request("consent: a voice clone needs the speaker's consent: record it "
                          "with POST /v1/audio/voice_consents and give its id",
                          "consent", "consent_required")
    allowed = await owned_consent(session, consent.strip(), owner)
    if allowed is None:
        raise bad_request(f"consent: no voice consent '{consent.strip()}' of this key (see "
                          "GET /v1/audio/voice_consents)", "consent", "consent_not_found")
    cloners = [m for m in await state.catalogue.models() if m.task_type == "Base"]
    target = next((m for m in cloners if model in (None, m.id)), None)
    if target is None:
        which = f"named {model!r}" if model else "is served here"
        raise bad_request(f"model: no voice-clone (Base) model {which}; uploaded voices "
                          "need a Qwen3-TTS Base checkpoint", "model", "model_not_found")
    data = await sample.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise ApiError(413, f"audio_sample: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB",
                       param="audio_sample", code="file_too_large")
    try:
        audio, rate = await anyio.to_thread.run_sync(check_clip, data)
    except BadClip as exc:
        raise bad_request(str(exc), "audio_sample", "invalid_audio") from None
    voice = Voice(owner=owner, name=name, model=target.id, ref_text=ref_text or None,
                  consent=allowed.statement, consent_id=allowed.id, sample_rate=rate,
                  duration_seconds=len(audio) / rate, created_at=utcnow())
    voice.id = uuid7()  # now: its media key is named after it
    voice.key = voice_key(voice.id)
    from core.audio import encode

    flac = await anyio.to_thread.run_sync(encode, audio, rate, "flac")
    await anyio.to_thread.run_sync(state.store.put, voice.key, flac)
    session.add(voice)
    await session.commit()
    return _object(voice, target)


@router.delete("/v1/audio/voices/{voice_id}")
async def delete_voice(voice_id: str, state: StateDep, session: SessionDep,
                       owner: OwnerDep) -> dict[str, Any]:
    """Delete an uploaded voice and its clip."""
    try:
        key = ids.parse(voice_id, ids.VOICE)
    except ValueError:
        raise not_found(f"voice '{voice_id}' not found", "voice_id") from None
    deleted = (await session.execute(delete(Voice).where(Voice.id == key, Voice.owner == owner)
                                     .returning(Voice.id))).first()
    if deleted is None:
        raise not_found(f"voice '{voice_id}' not found", "voice_id")
    await session.commit()
    await anyio.to_thread.run_sync(state.store.delete, f"voices/{key}")
    return {"id": voice_id, "object": "audio.voice.deleted", "deleted": True}
