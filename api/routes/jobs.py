"""Async jobs: create, get, list, content, cancel, retry, delete."""

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, cast

import anyio
import orjson
import structlog
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import defer
from starlette.concurrency import iterate_in_threadpool

from api import job_input
from api.errors import ApiError, Json, bad_request, not_found, unavailable
from api.quota import reserve
from api.routes.lexicons import named_lexicons
from api.routes.voices import uploaded_voices
from api.schemas import JobBody
from api.state import OwnerDep, SessionDep, State, StateDep
from api.validation import resolve
from core import ids
from core.cast import voice_for
from core.catalog import ModelInfo
from core.formats import CONTENT_TYPES
from core.keys import cover_key, job_prefix, result_store
from core.queues import ASSEMBLE, BATCH, NOTIFY, SYNTHESIZE, assembly_queue, model_queues
from core.text import voiced_runs
from core.views import job_object
from models import ACTIVE, Job, JobStatus, Segment, SegmentStatus, utcnow
from models import segments as segment_state
from models.base import uuid7
from models.transitions import atransition

router = APIRouter()
log = structlog.get_logger()
Variant = Literal["audio", "subtitles_srt", "subtitles_vtt", "subtitles_words", "manifest",
                  "chapter"]
PREVIEW_PARTS = 200  # a chapter's voiced parts the preview lists
MEDIA_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt", "json": "application/json",
               "words": "application/json"}


def _api_base(request: Request, state: State) -> str:
    return (state.settings.public_api_url or str(request.base_url)).rstrip("/")


def _render(job: Job, request: Request, state: State) -> dict[str, Any]:
    store = result_store(job.output_url)

    def url_for(key: str, local: str) -> str:
        return store.url(key, local_url=local)

    return job_object(job, url_for, _api_base(request, state))


def _parse_id(job_id: str) -> uuid.UUID:
    try:
        return ids.parse(job_id, ids.JOB)
    except ValueError:
        raise not_found(f"job '{job_id}' not found", "job_id") from None


async def _load(session: SessionDep, job_id: str, owner: str) -> Job:
    job = await session.scalar(
        select(Job).options(defer(Job.chapters, raiseload=True))
        .where(Job.id == _parse_id(job_id), Job.owner == owner, Job.deleted_at.is_(None)))
    if job is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return job


# Every column but the book's text, labelled with the attribute names (meta, not metadata).
# Built once with bound parameters, so SQLAlchemy finds its compiled form without
# computing a cache key per request.
_READ = select(*(prop.columns[0].label(prop.key) for prop in sa_inspect(Job).column_attrs
                 if prop.key != "chapters")).where(
    Job.id == bindparam("id"), Job.owner == bindparam("owner"), Job.deleted_at.is_(None))


INSERT_JOB = insert(cast(Table, Job.__table__))
COLUMN_KEYS = {prop.key: prop.columns[0].key for prop in sa_inspect(Job).column_attrs}


async def _read(state: State, job_id: str, owner: str) -> Job:
    """Load a job for reading: one SELECT on an autocommit connection (no BEGIN, no
    ROLLBACK, no ORM session). The row's labels are Job's attribute names, so it reads like
    a Job without the cost of building one (a tenth of a GET, bench.poll --profile)."""
    async with state.autocommit.connect() as connection:
        row = (await connection.execute(_READ, {"id": _parse_id(job_id),
                                                "owner": owner})).first()
    if row is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return cast(Job, row)


async def _text_of(body: JobBody, model: ModelInfo, own: Any, settings: Any
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
    lexicons: dict[tuple[str, tuple[str, ...]], tuple[list[str], list[dict[str, Any]]]] = \
        field(default_factory=dict)
    webhooks: set[str] = field(default_factory=set)

    @classmethod
    async def load(cls, state: State, session: Any, owner: str) -> "Shared":
        models = await state.catalogue.models()
        return cls(state, session, owner, models, await uploaded_voices(session, owner, models))


async def job_values(body: JobBody, shared: Shared, idempotency_key: str | None, digest: str,
                     cover_kind: str | None) -> dict[str, Any]:
    """Check one job body (a 400 for what is wrong) and return its row, not yet stored."""
    settings = shared.state.settings
    model, voice = resolve(body, shared.models, shared.own)
    chapters, voices = await _text_of(body, model, shared.own, settings)
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
        "voice": voice.id, "response_format": body.response_format, "speed": body.speed,
        "options": options, "chapters": chapters, "output_url": output_url,
        "webhook_url": body.webhook_url, "meta": body.metadata,
        "idempotency_key": idempotency_key, "request_hash": digest,
        "input_characters": sum(len(c["input"]) for c in chapters), "segments_total": 0,
        "segments_done": 0, "segments_failed": 0, "chars_done": 0, "audio_seconds": 0.0,
        "created_at": now, "updated_at": now}


@router.post("/v1/audio/jobs", status_code=202, openapi_extra={"requestBody": {
    "required": True, "content": {
        "application/json": {"schema": JobBody.model_json_schema()},
        "multipart/form-data": {"schema": job_input.MULTIPART}}}})
async def create_job(request: Request, state: StateDep, session: SessionDep,
                     owner: OwnerDep,
                     idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
                     ) -> Json:
    """Create a job (JSON, or an EPUB upload), commit it, then enqueue its plan."""
    parsed = await job_input.job_body(request, state.settings.max_body_bytes)
    body, cover = parsed.body, parsed.cover
    shared = await Shared.load(state, session, owner)
    cover_kind = await anyio.to_thread.run_sync(job_input.check_cover, cover) if cover else None
    digest = hashlib.sha256(orjson.dumps(body.model_dump(mode="json"),
                                         option=orjson.OPT_SORT_KEYS)
                            + parsed.upload_digest + (cover or b"")).hexdigest()
    values = await job_values(body, shared, idempotency_key, digest, cover_kind)
    if idempotency_key:
        existing = await session.scalar(
            select(Job).options(defer(Job.chapters, raiseload=True))
            .where(Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is not None:
            return _replay(existing, digest, request, state)
    options = values["options"]
    job = Job(**values)  # rendered below
    row = {COLUMN_KEYS[key]: value for key, value in values.items()}
    try:
        await _insert(session, state, owner, row)
    except IntegrityError:
        await session.rollback()
        existing = await session.scalar(select(Job).where(
            Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is None:
            raise
        return _replay(existing, digest, request, state)
    try:
        if cover is not None:
            await anyio.to_thread.run_sync(state.store.put, options["cover"], cover)
        await state.planner.plan(str(job.id))
    except Exception as exc:
        # Nobody has seen this job yet: remove it rather than leave it orphaned.
        await session.execute(delete(Job).where(Job.id == job.id))
        await session.commit()
        raise unavailable(f"the broker or storage is unreachable, the job was not created: "
                          f"{exc}") from exc
    rendered = _render(job, request, state)
    return Json(rendered, status_code=202,
                headers={"Location": f"/v1/audio/jobs/{rendered['id']}"})


async def _insert(session: Any, state: State, owner: str, row: dict[str, Any]) -> None:
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


@router.post("/v1/audio/jobs/preview", openapi_extra={"requestBody": {
    "required": True, "content": {
        "application/json": {"schema": JobBody.model_json_schema()},
        "multipart/form-data": {"schema": job_input.MULTIPART}}}})
async def preview_job(request: Request, state: StateDep, session: SessionDep,
                      owner: OwnerDep) -> dict[str, Any]:
    """Show the chapters a job body would have (the console shows them before submitting),
    with the cast and who speaks each part of each chapter; nothing is stored or enqueued,
    and the body is checked as a submit would check it."""
    body = (await job_input.job_body(request, state.settings.max_body_bytes)).body
    models = await state.catalogue.models()
    own = await uploaded_voices(session, owner, models)
    model, voice = resolve(body, models, own)
    chapters, voices = await _text_of(body, model, own, state.settings)
    return await anyio.to_thread.run_sync(_preview, model, voice, chapters, voices)


def _preview(model: ModelInfo, voice: Any, chapters: list[dict[str, Any]],
             voices: dict[str, Any]) -> dict[str, Any]:
    """Return the preview of checked chapters: who speaks each part (a pass over the text)."""
    def parts(n: int, text: str) -> list[dict[str, Any]]:  # the first PREVIEW_PARTS
        return [{"speaker": who, "voice": voice_for(voices, voice.id, n, who),
                 "characters": len(said), "excerpt": said[:200]}
                for who, said in voiced_runs(text)[:PREVIEW_PARTS]]

    return {"object": "audio.job.preview", "model": model.id, "voice": voice.id,
            "cast": {v["name"]: v["voice"] for v in voices.get("cast", {}).values()},
            "input_characters": sum(len(c["input"]) for c in chapters),
            "chapters": [{"title": c["title"], "characters": len(c["input"]),
                          "excerpt": c["input"][:200],
                          "voice": voice_for(voices, voice.id, n, None),
                          "parts": parts(n, c["input"])} for n, c in enumerate(chapters)]}


def _replay(job: Job, digest: str, request: Request, state: State) -> Json:
    if job.request_hash != digest:
        raise ApiError(409, "Idempotency-Key was already used with a different request body",
                       type="conflict_error", param="Idempotency-Key",
                       code="idempotency_key_reused")
    rendered = _render(job, request, state)
    return Json(rendered, status_code=202,
                headers={"Location": f"/v1/audio/jobs/{rendered['id']}",
                         "Idempotent-Replayed": "true"})


@router.get("/v1/audio/jobs")
async def list_jobs(request: Request, state: StateDep, session: SessionDep, owner: OwnerDep,
                    status: JobStatus | None = None,
                    limit: Annotated[int, Query(ge=1, le=100)] = 20,
                    after: str | None = None) -> dict[str, Any]:
    """List jobs, newest first; `after` is the last id of the previous page."""
    query = (select(Job).options(defer(Job.chapters, raiseload=True))
             .where(Job.owner == owner, Job.deleted_at.is_(None))
             .order_by(Job.id.desc()).limit(limit + 1))
    if status is not None:
        query = query.where(Job.status == status)
    if after:
        try:
            query = query.where(Job.id < ids.parse(after, ids.JOB))
        except ValueError:
            raise bad_request("after: not a job id", "after", "invalid_value") from None
    jobs = list((await session.scalars(query)).all())
    page = [_render(j, request, state) for j in jobs[:limit]]
    return {"object": "list", "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(jobs) > limit}


@router.get("/v1/audio/jobs/{job_id}")
async def get_job(job_id: str, request: Request, state: StateDep, owner: OwnerDep) -> Json:
    """Return the job object."""
    return Json(_render(await _read(state, job_id, owner), request, state))


@router.get("/v1/audio/jobs/{job_id}/content", response_class=Response)
async def job_content(job_id: str, state: StateDep, owner: OwnerDep,
                      variant: Variant = "audio", index: int | None = None,
                      version: Annotated[int | None, Query(ge=1)] = None) -> Response:
    """Stream the final audio or one of its side files (`version`: an earlier one's)."""
    job = await _read(state, job_id, owner)
    if version is not None and version != (job.version or 1):
        kept = (job.versions or {}).get(str(version))
        if kept is None:
            raise not_found(f"job has no version {version}; it is at version "
                            f"{job.version or 1}", "version")
        key, media_type = _content_key(job, variant, index, kept["result"])
    elif job.status != JobStatus.completed or not job.result:
        raise ApiError(409, f"job is {job.status.value}; content is available once completed",
                       type="conflict_error", code="job_not_completed")
    else:
        key, media_type = _content_key(job, variant, index)
    store = result_store(job.output_url)
    if not store.is_s3:
        return FileResponse(store.path(key), media_type=media_type)
    try:
        handle = await anyio.to_thread.run_sync(store.open, key)
    except OSError as exc:
        raise unavailable(f"storage is unreachable: {exc}") from exc
    return StreamingResponse(iterate_in_threadpool(_chunks(handle)), media_type=media_type)


def _chunks(handle: Any) -> Any:
    with handle:
        while chunk := handle.read(1 << 20):
            yield chunk


def _content_key(job: Job, variant: str, index: int | None,
                 result: dict[str, Any] | None = None) -> tuple[str, str]:
    result = result or job.result or {}
    audio_type = CONTENT_TYPES[job.response_format]
    if variant == "audio":
        return result["key"], audio_type
    if variant == "manifest":
        return result["manifest_key"], MEDIA_TYPES["json"]
    if variant.startswith("subtitles_"):
        kind = variant.removeprefix("subtitles_")
        if kind not in result.get("subtitles", {}):
            raise not_found(f"job has no {kind} subtitles; request them with 'subtitles'",
                            "variant")
        return result["subtitles"][kind], MEDIA_TYPES[kind]
    chapters = result.get("chapters", [])
    if index is None or not 0 <= index < len(chapters) or "key" not in chapters[index]:
        raise not_found(f"chapter index {index} not found; the job has "
                        f"{len(chapters)} chapter file(s)", "index")
    return chapters[index]["key"], audio_type


@router.post("/v1/audio/jobs/{job_id}/cancel")
async def cancel_job(job_id: str, request: Request, state: StateDep, session: SessionDep,
                     owner: OwnerDep) -> Json:
    """Stop a job; done segments stay done, pending ones never reach the engine."""
    job = await _load(session, job_id, owner)
    moved = await atransition(session, job.id, ACTIVE, JobStatus.cancelled,
                              completed_at=utcnow())
    await session.commit()
    if moved is not None and job.webhook_url:
        try:
            state.celery.send_task(NOTIFY, args=[str(job.id)], queue=BATCH)
        except Exception as exc:  # the cancel stands; only the webhook is late
            log.warning("webhook.enqueue_failed", job_id=str(job.id), error=str(exc))
    if moved is None:
        await session.refresh(job)
        if job.status != JobStatus.cancelled:
            raise ApiError(409, f"job is already {job.status.value}", type="conflict_error",
                           code="job_finished")
    await session.refresh(job)
    return Json(_render(job, request, state))


@router.post("/v1/audio/jobs/{job_id}/retry", status_code=202)
async def retry_job(job_id: str, request: Request, state: StateDep, session: SessionDep,
                    owner: OwnerDep) -> Json:
    """Run a failed job again: only its segments that did not finish, then its assembly.

    Finished parts are kept. A segment still running when the job failed is left to its
    worker (or to the reaper, if that worker is gone).
    """
    job = await _load(session, job_id, owner)
    if job.status != JobStatus.failed:
        raise ApiError(409, f"only a failed job can be retried; this one is {job.status.value}",
                       type="conflict_error", code="job_not_failed")
    if not job.segments_total:
        code = (job.error or {}).get("code", "failed")
        raise ApiError(409, f"the job failed before it was planned ({code}); a retry would "
                       "fail the same way: submit it again", type="conflict_error",
                       code="job_not_retryable")
    moved = await atransition(session, job.id, [JobStatus.failed], JobStatus.in_progress,
                              detail={"retry": True}, error=None, completed_at=None,
                              segments_failed=0)
    if moved is None:  # another request retried or deleted it meanwhile
        await session.rollback()
        raise ApiError(409, "the job changed while it was being retried", type="conflict_error",
                       code="job_not_failed")
    again = (await session.execute(segment_state.retried(job.id))).scalars().all()
    running = await session.scalar(select(func.count()).select_from(Segment).where(
        Segment.job_id == job.id, Segment.status == SegmentStatus.running))
    await session.commit()
    try:
        if again:
            queue = model_queues(job.model)[1]
            for segment_id in again:
                state.celery.send_task(SYNTHESIZE, args=[str(segment_id)], queue=queue)
        elif not running:  # every part is there: the assembly failed
            state.celery.send_task(ASSEMBLE, args=[str(job.id)],
                                   queue=assembly_queue(await state.catalogue.workers()))
    except Exception as exc:
        raise unavailable(f"the retry is recorded but the broker is unreachable ({exc}); the "
                          "job resumes when it is back (the reaper re-sends forgotten work)"
                          ) from exc
    log.info("job.retried", job_id=str(job.id), segments=len(again))
    await session.refresh(job)
    return Json(_render(job, request, state), status_code=202)


@router.delete("/v1/audio/jobs/{job_id}")
async def delete_job(job_id: str, state: StateDep, session: SessionDep,
                     owner: OwnerDep) -> dict[str, Any]:
    """Cancel the job if it runs, delete its media and mark it deleted."""
    job = await _load(session, job_id, owner)
    await atransition(session, job.id, ACTIVE, JobStatus.cancelled, completed_at=utcnow())
    await session.execute(update(Job).where(Job.id == job.id).values(deleted_at=utcnow()))
    await session.commit()
    stores = {state.store, result_store(job.output_url)}
    try:
        for store in stores:
            await anyio.to_thread.run_sync(store.delete, job_prefix(job.id))
    except OSError as exc:
        raise unavailable(f"the job is deleted but storage is unreachable: {exc}") from exc
    return {"id": ids.job_id(job.id), "object": "audio.job.deleted", "deleted": True}
