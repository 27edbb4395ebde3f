"""Admission: a job body checked and turned into its row, caps reserved, the row inserted.

`POST /v1/audio/jobs` and `POST /v1/audio/batches` admit through here: validation (a 400
for what is wrong, nothing stored), the per-key caps (api/quota.py), idempotency replays and
the insert. Re-render admits a changed job (api/routes/rerender.py) under the same caps.
"""

import hashlib
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import orjson
from fastapi import Request
from sqlalchemy import Table, insert
from sqlalchemy import inspect as sa_inspect

from api import job_input
from api.errors import ApiError, Json
from api.owned import named_lexicons, render_job, uploaded_voices
from api.quota import reserve
from api.schemas import JobBody
from api.state import KeyPolicy, State
from api.validation import resolve
from core.catalog import ModelInfo
from core.keys import cover_key
from models import Job, JobStatus, utcnow
from models.base import uuid7

INSERT_JOB = insert(cast(Table, Job.__table__))
COLUMN_KEYS = {prop.key: prop.columns[0].key for prop in sa_inspect(Job).column_attrs}


async def text_of(body: JobBody, model: ModelInfo, own: Any, settings: Any
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read a body's text (job_input.text_of): in a worker thread when it is long, so the
    event loop serves other requests meanwhile (each pass over the text is linear)."""
    args = (body, model, own, settings.job_max_chars, settings.max_chapters)
    if job_input.body_chars(body) <= job_input.INLINE_CHARS:
        return job_input.text_of(*args)
    return await anyio.to_thread.run_sync(job_input.text_of, *args)


@dataclass
class Shared:
    """What every job body of one request is checked against, loaded once per request."""

    state: State
    session: Any
    owner: str
    models: tuple[ModelInfo, ...]
    own: Any
    key: KeyPolicy
    lexicons: dict[tuple[str, tuple[str, ...]], tuple[list[str], list[dict[str, Any]]]] = \
        field(default_factory=dict)
    webhooks: set[str] = field(default_factory=set)

    @classmethod
    async def load(cls, state: State, session: Any, owner: str) -> "Shared":
        models = await state.catalogue.models()
        return cls(state, session, owner, models, await uploaded_voices(session, owner, models),
                   await state.keys.policy(owner))


async def job_values(body: JobBody, shared: Shared, idempotency_key: str | None, digest: str,
                     cover_kind: str | None) -> dict[str, Any]:
    """Check one job body (a 400 for what is wrong) and return its row, not yet stored."""
    settings = shared.state.settings
    allowed = shared.key.priorities or settings.allowed_priorities
    if body.priority not in allowed:
        raise ApiError(403, f"priority: '{body.priority}' is not allowed for this key (allowed: "
                       f"{', '.join(sorted(allowed))})",
                       type="permission_error", param="priority", code="priority_not_allowed")
    model, voice = resolve(body, shared.models, shared.own)
    chapters, voices = await text_of(body, model, shared.own, settings)
    output_url = job_input.check_output_url(body.output_url, settings.output_prefixes)
    refs = (model.id, tuple(body.lexicons))
    if refs not in shared.lexicons:
        shared.lexicons[refs] = await named_lexicons(shared.session, shared.owner,
                                                     body.lexicons, model)
    lexicons, lexicon = shared.lexicons[refs]
    if body.webhook_url is not None and body.webhook_url not in shared.webhooks:
        await job_input.check_webhook_url(body.webhook_url, settings.outbound_allow)
        shared.webhooks.add(body.webhook_url)
    options = {k: v for k, v in body.extras().items()} | {"subtitles": body.subtitles} | (
        {"verify": body.verify} if body.verify != "off" else {}) | (
        {"lexicons": lexicons, "lexicon": lexicon} if lexicons else {})
    key = uuid7()
    if body.book is not None:
        options["book"] = body.book.model_dump(exclude_none=True)
    if body.mastering != "none":
        options["mastering"] = body.mastering
    options |= voices
    if cover_kind is not None:
        options["cover"] = cover_key(key, cover_kind)
    now = utcnow()
    return {
        "id": key, "owner": shared.owner, "status": JobStatus.queued, "model": model.id,
        "priority": body.priority, "weight": shared.key.weight,
        "voice": voice.id, "response_format": body.response_format, "speed": body.speed,
        "options": options, "chapters": chapters, "output_url": output_url,
        "webhook_url": body.webhook_url, "meta": body.metadata,
        "idempotency_key": idempotency_key, "request_hash": digest,
        "input_characters": sum(len(c["input"]) for c in chapters), "segments_total": 0,
        "segments_done": 0, "segments_failed": 0, "chars_done": 0, "audio_seconds": 0.0,
        "created_at": now, "updated_at": now}


async def insert_job(session: Any, state: State, owner: str, row: dict[str, Any]) -> None:
    """Insert a job row: in the session's transaction after its key's caps are reserved
    (api/quota.py), or, for a key without caps, as one INSERT in autocommit (no BEGIN and
    COMMIT round trips) once the session has given its connection back: a request never
    holds one connection while it waits for a second (20 at once took the whole pool)."""
    settings = state.settings
    if settings.max_active_jobs_per_key or settings.max_chars_per_day_per_key:
        await reserve(session, owner, settings, row["input_characters"])
        await (await session.connection()).execute(INSERT_JOB, row)
        await session.commit()
        return
    await session.close()
    async with state.autocommit.connect() as connection:
        await connection.execute(INSERT_JOB, row)


def replay(job: Job, digest: str, request: Request, state: State) -> Json:
    """Answer a request whose Idempotency-Key made `job`: that job again (202), or a 409 if
    this body is not the one the key was first used with."""
    if job.request_hash != digest:
        raise ApiError(409, "Idempotency-Key was already used with a different request body",
                       type="conflict_error", param="Idempotency-Key",
                       code="idempotency_key_reused")
    rendered = render_job(job, request, state)
    return Json(rendered, status_code=202,
                headers={"Location": f"/v1/audio/jobs/{rendered['id']}",
                         "Idempotent-Replayed": "true"})


def digest_of(body: JobBody, upload_digest: bytes, cover: bytes | None) -> str:
    """The request's fingerprint an Idempotency-Key is bound to."""
    return hashlib.sha256(orjson.dumps(body.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
                          + upload_digest + (cover or b"")).hexdigest()
