"""A caller's own rows that requests name: jobs, uploaded voices, lexicons.

Every route that takes a job id, a voice or a lexicon reads it through here, scoped to the
caller (another key's row is "not found"), and renders a job the same way everywhere.
"""

import uuid
from typing import Any, cast

from fastapi import Request
from sqlalchemy import bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import defer

from api.errors import bad_request, not_found
from api.state import SessionDep, State
from core import ids
from core import lexicon as lex
from core.catalog import ModelInfo, VoiceInfo
from core.keys import result_store
from core.views import job_object
from models import Job, Lexicon, Voice, VoiceConsent
from models import segments as segment_state


def api_base(request: Request, state: State) -> str:
    """The API's public base URL (PUBLIC_API_URL, else the request's own)."""
    return (state.settings.public_api_url or str(request.base_url)).rstrip("/")


def render_job(job: Job, request: Request, state: State,
               queue: tuple[int, int] | None = None) -> dict[str, Any]:
    """The job object every route answers with (its media as URLs); `queue` (segments
    waiting for dispatch, in flight) where the route read it."""
    store = result_store(job.output_url)

    def url_for(key: str, local: str) -> str:
        return store.url(key, local_url=local)

    return job_object(job, url_for, api_base(request, state), queue)


def parse_job_id(job_id: str) -> uuid.UUID:
    """A public job id's key; a malformed id is a job that is not found."""
    try:
        return ids.parse(job_id, ids.JOB)
    except ValueError:
        raise not_found(f"job '{job_id}' not found", "job_id") from None


async def load_job(session: SessionDep, job_id: str, owner: str) -> Job:
    """The caller's job, to change in the session (not its text); 404 if not theirs."""
    job = await session.scalar(
        select(Job).options(defer(Job.chapters, raiseload=True))
        .where(Job.id == parse_job_id(job_id), Job.owner == owner, Job.deleted_at.is_(None)))
    if job is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return job


# Every column but the book's text, labelled with the attribute names (meta, not metadata).
# Built once with bound parameters, so SQLAlchemy finds its compiled form without
# computing a cache key per request.
READ_JOB = select(*(prop.columns[0].label(prop.key) for prop in sa_inspect(Job).column_attrs
                    if prop.key != "chapters")).where(
    Job.id == bindparam("id"), Job.owner == bindparam("owner"), Job.deleted_at.is_(None))


READ_JOB_QUEUE = READ_JOB.add_columns(*(column.label(name) for column, name in zip(
    segment_state.queue_of_job(), ("queue_waiting", "queue_in_flight"), strict=True)))


async def read_job_queue(state: State, job_id: str, owner: str) -> tuple[Job, tuple[int, int]]:
    """read_job, with the job's segments waiting for dispatch and in flight (the same
    statement: two counts over partial indexes)."""
    async with state.autocommit.connect() as connection:
        row = (await connection.execute(READ_JOB_QUEUE, {"id": parse_job_id(job_id),
                                                      "owner": owner})).first()
    if row is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return cast(Job, row), (int(row.queue_waiting), int(row.queue_in_flight))


async def read_job(state: State, job_id: str, owner: str) -> Job:
    """Load a job for reading: one SELECT on an autocommit connection (no BEGIN, no
    ROLLBACK, no ORM session). The row's labels are Job's attribute names, so it reads like
    a Job without the cost of building one (a tenth of a GET, bench.poll --profile)."""
    async with state.autocommit.connect() as connection:
        row = (await connection.execute(READ_JOB, {"id": parse_job_id(job_id),
                                                "owner": owner})).first()
    if row is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return cast(Job, row)


async def owned_consent(session: SessionDep, consent_id: str,
                        owner: str) -> VoiceConsent | None:
    """The owner's voice consent of that public id (`cons_<hex>`), or None."""
    try:
        key = ids.parse(consent_id, ids.CONSENT)
    except ValueError:
        return None
    return await session.scalar(select(VoiceConsent).where(VoiceConsent.id == key,
                                                           VoiceConsent.owner == owner))


def voice_public_id(voice: Voice) -> str:
    """Return `voice_<32 hex>`."""
    return ids.voice_id(voice.id)


async def uploaded_voices(session: SessionDep, owner: str,
                          models: tuple[ModelInfo, ...]) -> list[VoiceInfo]:
    """Return the owner's uploaded voices, for models that clone (Base checkpoints)."""
    cloners = {m.id: m for m in models if m.task_type == "Base"}
    if not cloners:
        return []
    rows = await session.scalars(select(Voice).where(Voice.owner == owner,
                                                     Voice.model.in_(cloners)))
    return [VoiceInfo(id=voice_public_id(v), name=v.name, model=v.model,
                      languages=cloners[v.model].languages, kind="uploaded",
                      disabled=v.consent_id is None) for v in rows]


def lexicon_where(ref: str, owner: str) -> Any:
    """Match a lexicon by its id or its name (names never start with the id's prefix)."""
    try:
        key = ids.parse(ref, ids.LEXICON) if ref.startswith(ids.LEXICON) else None
    except ValueError:
        key = None
    return (Lexicon.owner == owner) & (Lexicon.name == ref if key is None else Lexicon.id == key)


async def named_lexicons(session: SessionDep, owner: str, refs: list[str],
                         model: ModelInfo) -> tuple[list[str], list[dict[str, Any]]]:
    """Return the ids and the merged entries of the lexicons a request names (a 400 for one
    that does not exist, or for IPA the model's engine cannot speak)."""
    if not refs:
        return [], []
    found = []
    for ref in refs:
        row = await session.scalar(select(Lexicon).where(lexicon_where(ref, owner)))
        if row is None:
            raise bad_request(f"lexicons: no lexicon '{ref}' (see GET /v1/audio/lexicons)",
                              "lexicons", "lexicon_not_found")
        found.append(row)
    entries = lex.merged(r.entries for r in found)
    phonemic = lex.ipa_entries(entries)
    if phonemic and not model.phonemes:
        raise bad_request(f"lexicons: entries given as IPA ({', '.join(phonemic[:5])}) cannot "
                          f"be spoken by model '{model.id}' ({model.engine} takes no "
                          "phonemes); give them as 'alias' respellings", "lexicons",
                          "unsupported_parameter")
    for entry in entries:
        odd = sorted({c for c in entry.get("ipa", "") if c not in model.phonemes
                      and not c.isspace()})
        if odd:
            raise bad_request(f"lexicons: the IPA of '{entry['text']}' has symbols model "
                              f"'{model.id}' does not speak: {' '.join(odd)}", "lexicons",
                              "unsupported_parameter")
    return [ids.lexicon_id(r.id) for r in found], entries
