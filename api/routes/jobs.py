"""Async jobs: create, get, list, content, cancel, delete."""

import hashlib
import posixpath
import uuid
from typing import Annotated, Any, Literal

import anyio
import orjson
import structlog
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import ValidationError
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import defer
from starlette.concurrency import iterate_in_threadpool
from starlette.datastructures import UploadFile

from api.errors import ApiError, Json, bad_request, not_found, unavailable
from api.routes.voices import uploaded_voices
from api.schemas import Chapter, JobBody
from api.state import OwnerDep, SessionDep, State, StateDep
from api.validation import resolve, text_field
from api.views import job_object
from models import ACTIVE, Job, JobStatus, utcnow
from models.transitions import atransition
from storage import MediaStore, store_for
from workers.epub import BadEpub
from workers.epub import chapters as epub_chapters
from workers.formats import CONTENT_TYPES
from workers.markdown import chapters as markdown_chapters

router = APIRouter()
log = structlog.get_logger()
Variant = Literal["audio", "subtitles_srt", "subtitles_vtt", "manifest", "chapter"]
MEDIA_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt", "json": "application/json"}


def _api_base(request: Request, state: State) -> str:
    return (state.settings.public_api_url or str(request.base_url)).rstrip("/")


def _render(job: Job, request: Request, state: State) -> dict[str, Any]:
    store = _store(job, state)

    def url_for(key: str, local: str) -> str:
        return store.url(key, local_url=local)

    return job_object(job, url_for, _api_base(request, state))


def _store(job: Job, state: State) -> MediaStore:
    return store_for(job.output_url) if job.output_url else state.store


def _parse_id(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(hex=job_id.removeprefix("job_"))
    except ValueError:
        raise not_found(f"job '{job_id}' not found", "job_id") from None


async def _load(session: SessionDep, job_id: str, owner: str) -> Job:
    job = await session.scalar(
        select(Job).options(defer(Job.chapters, raiseload=True))
        .where(Job.id == _parse_id(job_id), Job.owner == owner, Job.deleted_at.is_(None)))
    if job is None:
        raise not_found(f"job '{job_id}' not found", "job_id")
    return job


def _chapters(body: JobBody, limit: int, max_chapters: int) -> list[dict[str, Any]]:
    if body.input is None and body.chapters is None:
        raise bad_request("input: this field is required (or give 'chapters')", "input",
                          "invalid_value")
    if body.input is not None and body.chapters is not None:
        raise bad_request("input: give either 'input' or 'chapters', not both", "input",
                          "invalid_value")
    if body.input is not None and body.input_format == "markdown":
        parsed = markdown_chapters(body.input)
        if not parsed:
            raise bad_request("input: the Markdown has nothing to speak", "input", "empty_input")
        body = body.model_copy(update={"input": None, "chapters": [
            Chapter(title=c["title"], input=c["input"]) for c in parsed]})
    elif body.input is not None:
        return [{"title": None, "input": text_field(body.input, "input", limit)}]
    elif body.input_format == "markdown":  # chapters given: strip each one's markup
        plain = [Chapter(title=c.title, input="\n\n".join(
            part["input"] for part in markdown_chapters(c.input))) for c in body.chapters or []]
        body = body.model_copy(update={"chapters": plain})
    assert body.chapters is not None
    if not body.chapters:
        raise bad_request("chapters: must not be empty", "chapters", "empty_input")
    if len(body.chapters) > max_chapters:
        raise bad_request(f"chapters: {len(body.chapters)} is over the limit of {max_chapters}",
                          "chapters", "too_many_chapters")
    chapters: list[dict[str, Any]] = [
        {"title": c.title, "input": text_field(c.input, f"chapters.{n}.input", limit)}
        for n, c in enumerate(body.chapters)
    ]
    total = sum(len(c["input"]) for c in chapters)
    if total > limit:
        raise bad_request(f"chapters: {total} characters in all is over the limit of {limit}",
                          "chapters", "input_too_long")
    return chapters


def _check_output_url(url: str | None, allowed: list[str]) -> str | None:
    """Return the normalised output URL if it lies under an allowed prefix, else a 400."""
    if url is None:
        return None
    scheme, sep, path = url.partition("://")
    if scheme != "s3" or not sep or not path.strip("/"):
        raise bad_request("output_url: must be s3://bucket/prefix", "output_url",
                          "invalid_value")
    normal = f"s3://{posixpath.normpath('/' + path).lstrip('/')}"
    if not allowed:
        raise bad_request("output_url: delivery to an external location is not enabled on "
                          "this server (NARRATOR_OUTPUT_URL_PREFIXES)", "output_url",
                          "unsupported_parameter")
    if not any((normal + "/").startswith(prefix) for prefix in allowed):
        raise bad_request(f"output_url: not under an allowed prefix ({', '.join(allowed)})",
                          "output_url", "output_url_not_allowed")
    return normal


_MULTIPART = {
    "type": "object", "required": ["file"],
    "properties": {"file": {"type": "string", "format": "binary",
                            "description": "an EPUB; chapters come from its spine and TOC"},
                   "request": {"type": "string",
                               "description": "the JSON job fields, without input/chapters"}}}


async def _job_body(request: Request, max_bytes: int) -> tuple[JobBody, bytes]:
    """Parse a JSON body, or a multipart EPUB upload with a `request` JSON field."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        raw = await request.body()
        try:
            return JobBody.model_validate_json(raw), b""
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from None
    form = await request.form(max_files=1, max_fields=20, max_part_size=max_bytes)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise bad_request("file: upload an EPUB as the 'file' field", "file", "invalid_value")
    data = await upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ApiError(413, f"file: larger than {max_bytes // (1024 * 1024)} MB",
                       param="file", code="file_too_large")
    fields = form.get("request") or "{}"
    try:
        body = JobBody.model_validate_json(fields if isinstance(fields, str) else "{}")
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    if body.input is not None or body.chapters is not None:
        raise bad_request("input: give the text as the EPUB file or as JSON, not both",
                          "input", "invalid_value")
    try:
        parsed = await anyio.to_thread.run_sync(epub_chapters, data)
    except BadEpub as exc:
        raise bad_request(str(exc), "file", "invalid_epub") from None
    chapters = [Chapter(title=(c["title"] or "")[:500] or None, input=c["input"]) for c in parsed]
    return body.model_copy(update={"chapters": chapters}), hashlib.sha256(data).digest()


@router.post("/v1/audio/jobs", status_code=202, openapi_extra={"requestBody": {
    "required": True, "content": {
        "application/json": {"schema": JobBody.model_json_schema()},
        "multipart/form-data": {"schema": _MULTIPART}}}})
async def create_job(request: Request, state: StateDep, session: SessionDep,
                     owner: OwnerDep,
                     idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
                     ) -> Json:
    """Create a job (JSON, or an EPUB upload), commit it, then enqueue its plan."""
    body, upload_digest = await _job_body(request, state.settings.max_body_bytes)
    models = await state.catalogue.models()
    model, voice = resolve(body, models, await uploaded_voices(session, owner, models))
    chapters = _chapters(body, state.settings.job_max_chars, state.settings.max_chapters)
    output_url = _check_output_url(body.output_url, state.settings.output_prefixes)
    digest = hashlib.sha256(orjson.dumps(body.model_dump(mode="json"),
                                         option=orjson.OPT_SORT_KEYS) + upload_digest).hexdigest()
    if idempotency_key:
        existing = await session.scalar(
            select(Job).options(defer(Job.chapters, raiseload=True))
            .where(Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is not None:
            return _replay(existing, digest, request, state)
    options = {k: v for k, v in body.extras().items()} | {"subtitles": body.subtitles}
    job = Job(owner=owner, model=model.id, voice=voice.id, response_format=body.response_format,
              speed=body.speed, options=options, chapters=chapters, output_url=output_url,
              webhook_url=body.webhook_url, meta=body.metadata,
              idempotency_key=idempotency_key, request_hash=digest,
              input_characters=sum(len(c["input"]) for c in chapters))
    session.add(job)
    try:
        await session.commit()
    except IntegrityError:
        await session.rollback()
        existing = await session.scalar(select(Job).where(
            Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is None:
            raise
        return _replay(existing, digest, request, state)
    try:
        state.celery.send_task("narrator.plan", args=[str(job.id)], queue="batch")
    except Exception as exc:
        # Nobody has seen this job yet: remove it rather than leave it orphaned.
        await session.execute(delete(Job).where(Job.id == job.id))
        await session.commit()
        raise unavailable(f"the broker is unreachable, the job was not created: {exc}") from exc
    rendered = _render(job, request, state)
    return Json(rendered, status_code=202,
                headers={"Location": f"/v1/audio/jobs/{rendered['id']}"})


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
            query = query.where(Job.id < uuid.UUID(hex=after.removeprefix("job_")))
        except ValueError:
            raise bad_request("after: not a job id", "after", "invalid_value") from None
    jobs = list((await session.scalars(query)).all())
    page = [_render(j, request, state) for j in jobs[:limit]]
    return {"object": "list", "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(jobs) > limit}


@router.get("/v1/audio/jobs/{job_id}")
async def get_job(job_id: str, request: Request, state: StateDep, session: SessionDep,
                  owner: OwnerDep) -> Json:
    """Return the job object."""
    return Json(_render(await _load(session, job_id, owner), request, state))


@router.get("/v1/audio/jobs/{job_id}/content", response_class=Response)
async def job_content(job_id: str, state: StateDep, session: SessionDep, owner: OwnerDep,
                      variant: Variant = "audio", index: int | None = None) -> Response:
    """Stream the final audio or one of its side files."""
    job = await _load(session, job_id, owner)
    if job.status != JobStatus.completed or not job.result:
        raise ApiError(409, f"job is {job.status.value}; content is available once completed",
                       type="conflict_error", code="job_not_completed")
    key, media_type = _content_key(job, variant, index)
    store = _store(job, state)
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


def _content_key(job: Job, variant: str, index: int | None) -> tuple[str, str]:
    result = job.result or {}
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
            state.celery.send_task("narrator.notify", args=[str(job.id)], queue="batch")
        except Exception as exc:  # the cancel stands; only the webhook is late
            log.warning("webhook.enqueue_failed", job_id=str(job.id), error=str(exc))
    if moved is None:
        await session.refresh(job)
        if job.status != JobStatus.cancelled:
            raise ApiError(409, f"job is already {job.status.value}", type="conflict_error",
                           code="job_finished")
    await session.refresh(job)
    return Json(_render(job, request, state))


@router.delete("/v1/audio/jobs/{job_id}")
async def delete_job(job_id: str, state: StateDep, session: SessionDep,
                     owner: OwnerDep) -> dict[str, Any]:
    """Cancel the job if it runs, delete its media and mark it deleted."""
    job = await _load(session, job_id, owner)
    await atransition(session, job.id, ACTIVE, JobStatus.cancelled, completed_at=utcnow())
    await session.execute(update(Job).where(Job.id == job.id).values(deleted_at=utcnow()))
    await session.commit()
    stores = {state.store, _store(job, state)}
    try:
        for store in stores:
            await anyio.to_thread.run_sync(store.delete, f"jobs/{job.id}")
    except OSError as exc:
        raise unavailable(f"the job is deleted but storage is unreachable: {exc}") from exc
    return {"id": f"job_{job.id.hex}", "object": "audio.job.deleted", "deleted": True}
