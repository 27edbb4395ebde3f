"""Celery tasks: thin wrappers that take ids, call the pipeline and enqueue after commit."""

import uuid
from typing import Any

import structlog
from celery import Task
from celery.signals import worker_init

from workers import pipeline, speech
from workers.app import BATCH, celery_app
from workers.engines import SpeechRequest, get_engine
from workers.settings import get_settings

log = structlog.get_logger()


@worker_init.connect
def _warm_engine(**_: Any) -> None:
    """Load the engine and run it once before the worker takes tasks (solo/threads pools)."""
    engine = get_engine()
    engine.synthesize([SpeechRequest(text="Ready.", voice=engine.info.voices[0].id)])
    log.info("engine.ready", engine=engine.info.engine, model=engine.info.id)


@celery_app.task(name="narrator.plan")
def plan(job_id: str) -> None:
    """Plan a job and enqueue its segments."""
    ids = pipeline.plan(uuid.UUID(job_id))
    if ids == [uuid.UUID(job_id)]:
        assemble.apply_async((job_id,), queue=BATCH)
        return
    for segment_id in ids:
        synthesize.apply_async((str(segment_id),), queue=BATCH)


@celery_app.task(name="narrator.synthesize", bind=True)
def synthesize(self: Task[Any, Any], segment_id: str) -> None:
    """Synthesise one segment; the last one to finish enqueues assembly."""
    try:
        job_id = pipeline.synthesize(uuid.UUID(segment_id))
    except Exception as exc:
        log.exception("segment.failed", segment_id=segment_id)
        settings = get_settings()
        if pipeline.release(uuid.UUID(segment_id), repr(exc), settings.segment_max_attempts):
            raise self.retry(countdown=2 ** min(self.request.retries, 6), max_retries=None,
                             exc=exc) from exc
        return
    if job_id is not None:
        assemble.apply_async((str(job_id),), queue=BATCH)


@celery_app.task(name="narrator.assemble", autoretry_for=(OSError,), retry_backoff=True,
                 max_retries=8)
def assemble(job_id: str) -> None:
    """Assemble a job whose segments are all done; storage errors are retried with backoff."""
    pipeline.assemble(uuid.UUID(job_id))


@celery_app.task(name="narrator.speak")
def speak(payload: dict[str, Any]) -> None:
    """Answer one sync speech request on its channel."""
    speech.speak(payload)
