"""`POST /v1/audio/jobs/{id}/rerender`: synthesise chosen chapters or segments of a completed
job again (with a new voice, seed or lexicons, if given), then assemble the book again as a
new version; the parts that did not change are reused, and earlier versions stay."""

from typing import Any

import anyio
import structlog
from fastapi import APIRouter, Request
from sqlalchemy import delete, func, select

from api.errors import ApiError, Json, bad_request, unavailable
from api.owned import load_job, named_lexicons, render_job, uploaded_voices
from api.quota import reserve
from api.replan import Part, replan
from api.schemas import RerenderBody
from api.state import OwnerDep, SessionDep, StateDep
from api.validation import find_voice, text_field
from core.keys import part_key
from core.queues import SYNTHESIZE, model_queues
from models import Fragment, Job, JobStatus, Segment
from models import segments as segment_state
from models.transitions import atransition

router = APIRouter()
log = structlog.get_logger()


def _conflict(message: str, code: str) -> ApiError:
    return ApiError(409, message, type="conflict_error", code=code)


@router.post("/v1/audio/jobs/{job_id}/rerender", status_code=202)
async def rerender_job(job_id: str, body: RerenderBody, request: Request, state: StateDep,
                       session: SessionDep, owner: OwnerDep) -> Json:
    """Re-render part of a completed job as its next version."""
    job = await load_job(session, job_id, owner)
    if job.status != JobStatus.completed:
        raise _conflict(f"only a completed job can be re-rendered; this one is "
                        f"{job.status.value}", "job_not_completed")
    rows = [Part(*r) for r in (await session.execute(
        select(Segment.id, Segment.index, Segment.chapter, Segment.overrides)
        .where(Segment.job_id == job.id).order_by(Segment.index))).all()]
    texts = _new_texts(body, rows, state.settings.job_max_chars)
    chosen = [r for r in rows if r.chapter not in texts and (
        r.chapter in body.chapters or any(g.first <= r.number <= g.last for g in body.segments))]
    book = await _new_book(session, job, texts, state.settings.job_max_chars)
    changes = await _changes(body, job, state, session, owner)
    if not await anyio.to_thread.run_sync(state.store.exists, part_key(job.id, rows[0].number)):
        raise _conflict("this job's parts were not kept (KEEP_PARTS=false, or it completed "
                        "before re-rendering existed): submit it again", "parts_not_kept")
    plan = await anyio.to_thread.run_sync(replan, rows, texts, state.settings,
                                          job.options.get("language"))
    earlier = dict(job.versions or {}) | {str(job.version or 1): {
        "result": job.result, "completed_at": job.completed_at.isoformat()
        if job.completed_at else None}}
    # Charged as a job: what it synthesises again (api/quota.py); the job is active again.
    lengths: dict[Any, int] = dict((await session.execute(
        select(Segment.id, func.length(Segment.text)).where(Segment.job_id == job.id)
    )).tuples().all())
    spoken = sum(lengths.get(r.id, 0) for r in chosen) + sum(map(len, texts.values()))
    await reserve(session, owner, state.settings, spoken)
    moved = await atransition(
        session, job.id, [JobStatus.completed], JobStatus.in_progress,
        detail={"rerender": len(chosen) + len(plan.new), "version": (job.version or 1) + 1},
        version=Job.version + 1, versions=earlier, completed_at=None, expires_at=None,
        segments_done=len(rows) - len(plan.removed) - len(chosen),
        segments_total=len(rows) - len(plan.removed) + len(plan.new), chapters=book,
        input_characters=sum(len(c["input"]) for c in book))
    if moved is None:
        await session.rollback()
        raise _conflict("the job changed while it was being re-rendered", "job_not_completed")
    await anyio.to_thread.run_sync(plan.move_parts, state.store, job.id)  # the job row is held
    await plan.renumber(session, job.id)
    # The stream starts over with this version: its fragments are recorded as they land.
    await session.execute(delete(Fragment).where(Fragment.job_id == job.id))
    for row in chosen:  # earlier overrides stay unless this re-render changes them
        await session.execute(segment_state.rerendered(
            row.id, (row.overrides or {}) | changes or None))
    fresh = await plan.insert(session, job.id, changes or None)
    await session.commit()
    _enqueue(state, job.model, [*(row.id for row in chosen), *fresh])
    log.info("job.rerender", job_id=str(job.id), segments=len(chosen) + len(fresh))
    await session.refresh(job)
    return Json(render_job(job, request, state), status_code=202)


def _new_texts(body: RerenderBody, rows: list[Part], max_chars: int) -> dict[int, str]:
    """Check the chapters and segments chosen against the job's; return the chapters' new
    texts (`inputs`), each checked as a job's input is."""
    chapters = 1 + max((r.chapter for r in rows), default=-1)
    for n in body.chapters:
        if n >= chapters:
            raise bad_request(f"chapters: the job has {chapters} chapter(s), numbered from 0; "
                              f"there is no {n}", "chapters", "invalid_value")
    for r in body.segments:
        if r.last >= len(rows):
            raise bad_request(f"segments: the job has {len(rows)} segments, numbered from 0; "
                              f"{r.first}-{r.last} goes past them", "segments", "invalid_value")
    texts = {}
    for key, value in body.inputs.items():
        if int(key) >= chapters:
            raise bad_request(f"inputs.{key}: the job has {chapters} chapter(s), numbered from "
                              "0", f"inputs.{key}", "invalid_value")
        texts[int(key)] = text_field(value, f"inputs.{key}", max_chars)
    return texts


async def _new_book(session: SessionDep, job: Job, texts: dict[int, str],
                    max_chars: int) -> list[dict[str, Any]]:
    """Return the job's chapters with the new texts in place, within the job's length limit."""
    book = list(await session.scalar(select(Job.chapters).where(Job.id == job.id)) or [])
    for n, text in texts.items():
        book[n] = book[n] | {"input": text}
    total = sum(len(c["input"]) for c in book)
    if total > max_chars:
        raise bad_request(f"inputs: the book would have {total} characters, over the limit "
                          f"of {max_chars}", "inputs", "input_too_long")
    return book


def _enqueue(state: StateDep, model: str, segment_ids: list[Any]) -> None:
    """Send the segments to synthesis; 503 when the broker is unreachable (the re-render is
    committed: the reaper sends them once it is back)."""
    try:
        queue = model_queues(model)[1]
        for segment_id in segment_ids:
            state.celery.send_task(SYNTHESIZE, args=[str(segment_id)], queue=queue)
    except Exception as exc:
        raise unavailable(f"the re-render is recorded but the broker is unreachable ({exc}); "
                          "it resumes when it is back (the reaper re-sends forgotten work)"
                          ) from exc


async def _changes(body: RerenderBody, job: Job, state: StateDep, session: SessionDep,
                   owner: str) -> dict[str, Any]:
    """Return the segments' new settings, each checked against the job's model."""
    models = await state.catalogue.models()
    model = next((m for m in models if m.id == job.model), None)
    if model is None:
        raise unavailable(f"no worker serves the job's model '{job.model}' now", 10)
    changes: dict[str, Any] = {}
    if body.voice is not None:
        found = find_voice(model, await uploaded_voices(session, owner, models), body.voice)
        if found is None:
            raise bad_request(f"voice: unknown voice '{body.voice}' for model '{model.id}'",
                              "voice", "voice_not_found")
        changes["voice"] = found.id
    if body.seed is not None:
        if "seed" not in model.extras:
            raise bad_request(f"seed: not supported by model '{model.id}'", "seed",
                              "unsupported_parameter")
        changes["seed"] = body.seed
    if body.lexicons is not None:
        changes["lexicon"] = (await named_lexicons(session, owner, body.lexicons, model))[1]
    return changes

