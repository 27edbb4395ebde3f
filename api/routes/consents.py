"""Voice consents, as OpenAI's API has them: a recording of the speaker reading the consent
statement, heard back before it is stored; a cloned voice names one (api/routes/voices.py).
Create, list, get, rename, delete (which disables its voices), and hear the recording."""

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, Field
from sqlalchemy import func, select, update

from api.errors import ApiError, bad_request, not_found
from api.owned import owned_consent
from api.state import OwnerDep, SessionDep, StateDep
from core import consent, ids
from core.keys import consent_key
from core.voices import MAX_UPLOAD_BYTES, BadClip
from models import Voice, VoiceConsent, utcnow, uuid7

router = APIRouter()
# One recording heard at a time per API process: the recogniser decodes one utterance at a
# time anyway, and waiting requests then hold no thread.
_hearing = anyio.CapacityLimiter(1)


class ConsentUpdate(BaseModel):
    """A consent's new label."""

    name: str = Field(min_length=1, max_length=128,
                      description="the label: the speaker's name, say")


def _object(row: VoiceConsent, voices: int | None = None) -> dict[str, Any]:
    return {"id": ids.consent_id(row.id), "object": "audio.voice_consent", "name": row.name,
            "language": row.language, "created_at": int(row.created_at.timestamp()),
            "statement": row.statement, "transcript": row.transcript,
            "word_error_rate": round(row.word_error_rate, 3),
            "duration_seconds": round(row.duration_seconds, 3)} | (
        {} if voices is None else {"voices": voices})


async def _one(session: SessionDep, consent_id: str, owner: str) -> VoiceConsent:
    row = await owned_consent(session, consent_id, owner)
    if row is None:
        raise not_found(f"voice consent '{consent_id}' not found", "consent_id")
    return row


@router.post("/v1/audio/voice_consents")
async def create_consent(
    state: StateDep, session: SessionDep, owner: OwnerDep,
    recording: Annotated[UploadFile, File(
        description="the speaker reading the consent statement, 1-30 s, at most 10 MB")],
    name: Annotated[str, Form(min_length=1, max_length=128,
                              description="a label: the speaker's name, say")],
    language: Annotated[str, Form(min_length=2, max_length=35,
                                  description="BCP 47 tag of the statement read (en, en-US)")],
) -> dict[str, Any]:
    """Hear the recording against the consent statement; store it if it says it."""
    if consent.primary(language) not in consent.LANGUAGES:
        raise bad_request(f"language: consent recordings can be heard in English only here "
                          f"({', '.join(consent.LANGUAGES)}, en-US, en-GB...), not "
                          f"'{language}'", "language", "unsupported_language")
    data = await recording.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise ApiError(413, f"recording: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB",
                       param="recording", code="file_too_large")
    try:
        heard = await anyio.to_thread.run_sync(consent.hear, data, limiter=_hearing)
    except BadClip as exc:
        raise bad_request(str(exc).replace("file:", "recording:", 1), "recording",
                          "invalid_audio") from None
    except consent.NotHeard as exc:
        raise bad_request(str(exc), "recording", "consent_not_heard") from None
    row = VoiceConsent(id=uuid7(), owner=owner, name=name, language=language.strip(),
                       statement=consent.STATEMENT, transcript=heard.transcript,
                       word_error_rate=heard.word_error_rate,
                       duration_seconds=len(heard.audio) / heard.rate, created_at=utcnow())
    row.key = consent_key(row.id)
    from core.audio import encode

    flac = await anyio.to_thread.run_sync(encode, heard.audio, heard.rate, "flac")
    await anyio.to_thread.run_sync(state.store.put, row.key, flac)
    session.add(row)
    await session.commit()
    return _object(row, voices=0)


@router.get("/v1/audio/voice_consents")
async def list_consents(session: SessionDep, owner: OwnerDep,
                        limit: Annotated[int, Query(ge=1, le=100)] = 20,
                        after: str | None = None) -> dict[str, Any]:
    """List the key's consents, newest first; `after` is the last id of the previous page."""
    query = (select(VoiceConsent).where(VoiceConsent.owner == owner)
             .order_by(VoiceConsent.id.desc()).limit(limit + 1))
    if after:
        try:
            query = query.where(VoiceConsent.id < ids.parse(after, ids.CONSENT))
        except ValueError:
            raise bad_request("after: not a voice consent id", "after", "invalid_value") from None
    rows = list(await session.scalars(query))
    page = [_object(r) for r in rows[:limit]]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(rows) > limit}


@router.get("/v1/audio/voice_consents/statement")
async def get_statement() -> dict[str, Any]:
    """What a consent recording must say, and the languages it can be heard in."""
    return {"object": "audio.voice_consent_statement", "statement": consent.STATEMENT,
            "languages": list(consent.LANGUAGES)}


@router.get("/v1/audio/voice_consents/{consent_id}")
async def get_consent(consent_id: str, session: SessionDep, owner: OwnerDep) -> dict[str, Any]:
    """One consent, with how many voices name it."""
    row = await _one(session, consent_id, owner)
    return _object(row, voices=await _voices(session, row))


@router.post("/v1/audio/voice_consents/{consent_id}")
async def rename_consent(consent_id: str, body: ConsentUpdate, session: SessionDep,
                         owner: OwnerDep) -> dict[str, Any]:
    """Change a consent's label (nothing else of it can change)."""
    row = await _one(session, consent_id, owner)
    row.name = body.name
    await session.commit()
    return _object(row, voices=await _voices(session, row))


@router.get("/v1/audio/voice_consents/{consent_id}/recording")
async def get_recording(consent_id: str, state: StateDep, session: SessionDep,
                        owner: OwnerDep) -> Response:
    """The consent recording as stored (FLAC), for a person to hear."""
    row = await _one(session, consent_id, owner)
    data = await anyio.to_thread.run_sync(state.store.get, row.key)
    return Response(data, media_type="audio/flac")


@router.delete("/v1/audio/voice_consents/{consent_id}")
async def delete_consent(consent_id: str, state: StateDep, session: SessionDep,
                         owner: OwnerDep) -> dict[str, Any]:
    """Delete a consent and its recording; the voices that name it are disabled."""
    row = await _one(session, consent_id, owner)
    disabled = (await session.execute(
        update(Voice).where(Voice.consent_id == row.id, Voice.owner == owner)
        .values(consent_id=None).returning(Voice.id))).all()
    await session.delete(row)
    await session.commit()
    await anyio.to_thread.run_sync(state.store.delete, f"consents/{row.id}")
    return {"id": consent_id, "object": "audio.voice_consent.deleted", "deleted": True,
            "voices_disabled": len(disabled)}


async def _voices(session: SessionDep, row: VoiceConsent) -> int:
    return int(await session.scalar(select(func.count()).select_from(Voice)
                                    .where(Voice.consent_id == row.id)) or 0)
