"""Async jobs: create, get, list, content, cancel, retry, delete."""

from typing import Annotated, Any, Literal

import anyio
import structlog
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import defer
from starlette.concurrency import iterate_in_threadpool

from api import job_input
from api.admission import COLUMN_KEYS, Shared, digest_of, insert_job, job_values, replay, text_of
from api.errors import ApiError, Json, bad_request, not_found, unavailable
from api.owned import load_job, read_job, read_job_queue, render_job, uploaded_voices
from api.schemas import JobBody
from api.state import OwnerDep, SessionDep, StateDep
from api.validation import resolve
from core import ids
from core.cast import voice_for
from core.catalog import ModelInfo
from core.formats import CONTENT_TYPES
from core.keys import job_prefix, result_store
from core.queues import ASSEMBLE, BATCH, NOTIFY, SYNTHESIZE, assembly_queue, model_queues
from core.text import voiced_runs
from models import ACTIVE, Job, JobStatus, Segment, SegmentStatus, utcnow
from models import segments as segment_state
from models.transitions import atransition

router = APIRouter()
log = structlog.get_logger()
Variant = Literal["audio", "subtitles_srt", "subtitles_vtt", "subtitles_words", "manifest",
                  "chapter"]
PREVIEW_PARTS = 200  # a chapter's voiced parts the preview lists
MEDIA_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt", "json": "application/json",
               "words": "application/json"}


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
    digest = digest_of(body, parsed.upload_digest, cover)
    values = await job_values(body, shared, idempotency_key, digest, cover_kind)
    if idempotency_key:
        existing = await session.scalar(
            select(Job).options(defer(Job.chapters, raiseload=True))
            .where(Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is not None:
            return replay(existing, digest, request, state)
    options = values["options"]
    job = Job(**values)  # rendered below
    row = {COLUMN_KEYS[key]: value for key, value in values.items()}
    try:
        await insert_job(session, state, owner, row)
    except IntegrityError:
        await session.rollback()
        existing = await session.scalar(select(Job).where(
            Job.owner == owner, Job.idempotency_key == idempotency_key))
        if existing is None:
            raise
        return replay(existing, digest, request, state)
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
    rendered = render_job(job, request, state)
    return Json(rendered, status_code=202,
                headers={"Location": f"/v1/audio/jobs/{rendered['id']}"})


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
    chapters, voices = await text_of(body, model, own, state.settings)
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
    page = [render_job(j, request, state) for j in jobs[:limit]]
    return {"object": "list", "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(jobs) > limit}


@router.get("/v1/audio/jobs/{job_id}")
async def get_job(job_id: str, request: Request, state: StateDep, owner: OwnerDep) -> Json:
    """Return the job object, with its queue: segments waiting for dispatch and in flight."""
    job, queue = await read_job_queue(state, job_id, owner)
    return Json(render_job(job, request, state, queue))


@router.get("/v1/audio/jobs/{job_id}/content", response_class=Response)
async def job_content(job_id: str, state: StateDep, owner: OwnerDep,
                      variant: Variant = "audio", index: int | None = None,
                      version: Annotated[int | None, Query(ge=1)] = None) -> Response:
    """Stream the final audio or one of its side files (`version`: an earlier one's)."""
    job = await read_job(state, job_id, owner)
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
    job = await load_job(session, job_id, owner)
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
    return Json(render_job(job, request, state))


@router.post("/v1/audio/jobs/{job_id}/retry", status_code=202)
async def retry_job(job_id: str, request: Request, state: StateDep, session: SessionDep,
                    owner: OwnerDep) -> Json:
    """Run a failed job again: only its segments that did not finish, then its assembly.

    Finished parts are kept. A segment still running when the job failed is left to its
    worker (or to the reaper, if that worker is gone).
    """
    job = await load_job(session, job_id, owner)
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
    return Json(render_job(job, request, state), status_code=202)


@router.delete("/v1/audio/jobs/{job_id}")
async def delete_job(job_id: str, state: StateDep, session: SessionDep,
                     owner: OwnerDep) -> dict[str, Any]:
    """Cancel the job if it runs, delete its media and mark it deleted."""
    job = await load_job(session, job_id, owner)
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
