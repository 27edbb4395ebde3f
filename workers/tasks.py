"""Celery's layer: tasks that take ids, call the job code and enqueue what comes next, and
the worker signals connected to the process's life (workers/runtime/process.py)."""

import time
import uuid
from typing import Any

import httpx
import structlog
from celery import Task, bootsteps
from celery.signals import (
    task_postrun,
    task_prerun,
    task_received,
    worker_init,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from core import metrics, outbound, queues
from core.backoff import backoff
from core.catalog import catalog
from core.queues import (
    ALIGN,
    ASSEMBLE,
    ASSEMBLY,
    BATCH,
    ENCODE,
    NOTIFY,
    PLAN,
    PLAN_MANY,
    SPEAK,
    SYNTHESIZE,
    model_queues,
)
from core.registry import registry_for
from storage import STORAGE_ERRORS
from workers import speech
from workers.app import celery_app
from workers.book import alignment, progressive
from workers.jobs import dispatch, pipeline, reaper, webhooks
from workers.runtime.process import Hooks, WorkerProcess
from workers.runtime.warmup import WARM_UP_TEXT
from workers.settings import get_settings

log = structlog.get_logger()


WEBHOOK_MAX_ATTEMPTS = 11


def _before_engine() -> None:
    """Before the engine: zeroed metric series, and pysbd's import and first split (sync
    speech splits its text on vLLM-Omni; on the H100 the first streamed request after the
    warm-up took 178-195 ms, 53 ms after it, with pysbd's modules compiling at that moment,
    and an assembly worker imported it in its first book's assembly, for its cues)."""
    presence = worker.presence
    models = [m.id for m in presence.models] if presence else []
    metrics.zero(models, [*reaper.SWEEPS, "expired"])
    speech.groups(WARM_UP_TEXT + " " + WARM_UP_TEXT, "en", 2)


def _start_reaper() -> None:
    settings = get_settings()
    reaper.start(settings.reaper_interval_seconds, settings.segment_stale_seconds, _enqueue,
                 settings.segment_max_attempts, settings.retry_backoff_seconds,
                 settings.worker_dead_seconds, after=_dispatch_waiting)


def _hand_back() -> None:
    """Hand the segments this worker still holds back to the broker (shutdown's grace over)."""
    held = pipeline.hand_back()
    for segment_id, model in held:
        _enqueue(SYNTHESIZE, str(segment_id), model, 0.0)
    log.warning("worker.handed_back", segments=len(held),
                grace_seconds=get_settings().worker_shutdown_grace_seconds)


worker = WorkerProcess(Hooks(before_engine=_before_engine, ready=_start_reaper,
                             speak=speech.speak, hand_back=_hand_back,
                             connection=celery_app.connection_for_read))


class _RestartOnCeleryError(bootsteps.StartStopStep):
    """Celery closes every step of its worker first when it stops; a stop with a failing
    exit status and no signal is its "Unrecoverable error" (WorkerProcess.celery_failed)."""

    def close(self, parent: Any) -> None:
        if parent.exitcode:
            worker.celery_failed(parent.exitcode)


celery_app.steps["worker"].add(_RestartOnCeleryError)



@task_prerun.connect
def _task_started(task_id: str, task: Task[Any, Any], **_: Any) -> None:
    """Every log line of a task carries its name and id (segments add job_id and segment)."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task=task.name, task_id=task_id)
    worker.task_started()


@task_received.connect
def _taken(request: Any, **_: Any) -> None:
    """A segment's message left the broker for this worker: say so (pipeline.reserve)."""
    if request.name == SYNTHESIZE and request.args:
        try:
            pipeline.reserve(uuid.UUID(str(request.args[0])))
        except Exception:  # advisory: the claim records the worker anyway
            log.warning("segment.reserve_failed", exc_info=True)


@task_postrun.connect
def _task_ended(**_: Any) -> None:
    structlog.contextvars.clear_contextvars()
    worker.task_ended()


@worker_init.connect
def _starting(**_: Any) -> None:
    worker.start()  # the engine warm before Celery consumes (WorkerProcess.start)


@worker_ready.connect
def _consuming(**_: Any) -> None:
    worker.consuming()


@worker_shutting_down.connect
def _shutting_down(**_: Any) -> None:
    worker.shutting_down()


@worker_shutdown.connect
def _leave(**_: Any) -> None:
    worker.leave()


def assembly_queue() -> str:
    """Return where assembly goes now (core.queues.assembly_queue over the registry)."""
    presence = worker.presence
    registry = presence.registry if presence is not None else registry_for(get_settings())
    try:
        return queues.assembly_queue(registry.live())
    except Exception:  # the registry is advisory: every worker can assemble from BATCH
        log.warning("assembly.registry_unavailable", exc_info=True)
        return BATCH


_seen_assembler: tuple[float, bool] = (0.0, False)  # one tuple: replaced whole, thread-safe


def assembler_live() -> bool:
    """Return whether a worker takes the ASSEMBLY queue (asked at most every 2 s)."""
    global _seen_assembler
    at, live = _seen_assembler
    if time.monotonic() - at > 2.0:
        live = assembly_queue() == ASSEMBLY
        _seen_assembler = (time.monotonic(), live)
    return live


_targets: dict[str, tuple[float, int]] = {}  # model: (when read, target); replaced per key


def _dispatch(model: str) -> None:
    """Put the fairest waiting segments of `model` on its queue, as many as its workers have
    slots (workers/jobs/dispatch.py; the registry is read at most every 2 s)."""
    queue = model_queues(model)[1]
    dispatch.dispatch_in_turn(model, lambda: _target(model),
                              lambda segment: synthesize.apply_async((str(segment),), queue=queue))


def _target(model: str) -> int:
    """How many of `model`'s segments its queue should hold (the registry read at most
    every 2 s)."""
    at, wanted = _targets.get(model, (0.0, 0))
    if time.monotonic() - at > 2.0:
        presence = worker.presence
        registry = presence.registry if presence is not None else registry_for(get_settings())
        try:
            wanted = dispatch.target(model, registry.live())
        except Exception:  # the registry is advisory: fall back to the floor
            log.warning("dispatch.registry_unavailable", exc_info=True)
            wanted = dispatch.FLOOR
        _targets[model] = (time.monotonic(), wanted)
    return wanted


def _dispatch_waiting() -> None:
    """Dispatch for every model with waiting segments (after each reaper pass)."""
    for model in dispatch.waiting():
        _dispatch(model)


def _enqueue(task: str, item_id: str, model: str, countdown: float) -> None:
    """Send a task by name to the queue it belongs on (the reaper's re-enqueue)."""
    queue = model_queues(model)[1] if task == SYNTHESIZE else \
        assembly_queue() if task == ASSEMBLE else BATCH
    celery_app.send_task(task, args=[item_id], queue=queue, countdown=countdown or None)


@celery_app.task(name=PLAN)
def plan(job_id: str) -> None:
    """Plan a job, then dispatch: its segments wait in the database, and as many as the
    model's workers can start go on its queue, fairly among every key's jobs (dispatch.py)."""
    structlog.contextvars.bind_contextvars(job_id=job_id)
    model, ids = pipeline.plan(uuid.UUID(job_id))
    if ids == [uuid.UUID(job_id)]:
        assemble.apply_async((job_id,), queue=assembly_queue())
        return
    if ids:
        _dispatch(model)


@celery_app.task(name=PLAN_MANY)
def plan_many(job_ids: list[str]) -> None:
    """Plan the jobs submitted together (api.enqueue); one that fails is left to the reaper,
    which plans again any job still queued after SEGMENT_STALE_SECONDS."""
    for job_id in job_ids:
        try:
            plan(job_id)
        except Exception:
            log.exception("job.plan_failed", job_id=job_id)
        finally:
            structlog.contextvars.unbind_contextvars("job_id")


@celery_app.task(name=SYNTHESIZE, bind=True)
def synthesize(self: Task[Any, Any], segment_id: str) -> None:
    """Synthesise one segment; the last one to finish enqueues assembly. Its slot is then
    free: the fairest waiting segment of the worker's model goes on the queue."""
    try:
        _synthesize(self, segment_id)
    finally:
        _dispatch(catalog(get_settings())[0].id)


def _synthesize(self: Task[Any, Any], segment_id: str) -> None:
    try:
        done = pipeline.synthesize(uuid.UUID(segment_id))
    except Exception as exc:
        log.exception("segment.failed", segment_id=segment_id)
        settings = get_settings()
        metrics.segment_failures.labels(catalog(settings)[0].id).inc()
        if pipeline.release(uuid.UUID(segment_id), repr(exc), settings.segment_max_attempts):
            raise self.retry(countdown=backoff(self.request.retries + 1, 1.0, cap=64),
                             max_retries=None,
                             exc=exc) from exc
        job = pipeline.job_of(uuid.UUID(segment_id))
        if job is not None:
            notify.apply_async((str(job),), queue=BATCH)  # the job failed: tell its owner
        return
    if done is None:
        return
    if done.checked and assembler_live():
        # Word times for its subtitles and the recognition check, on a CPU worker: sent
        # before the assembly, which does what is not done by then.
        align_segment.apply_async((segment_id,), queue=ASSEMBLY)
    if done.last:
        assemble.apply_async((str(done.job_id),), queue=assembly_queue())
    elif assembler_live() and (ready := progressive.fragment_ready(uuid.UUID(segment_id))):
        # Its fragment (MP3, AAC) can be encoded now, on a CPU worker, while the rest is made:
        # what is left after the last segment is then a join, not the whole book's encode.
        encode_fragment.apply_async((str(ready[0]), ready[1]), queue=ASSEMBLY)


@celery_app.task(name=ENCODE)
def encode_fragment(job_id: str, first: int) -> None:
    """Encode one fragment ahead of the assembly; any failure leaves it to the assembly."""
    structlog.contextvars.bind_contextvars(job_id=job_id)
    try:
        progressive.encode_fragment(uuid.UUID(job_id), first)
    except Exception:
        log.warning("fragment.failed", job_id=job_id, first=first, exc_info=True)
    pipeline.drop_if_deleted(uuid.UUID(job_id))


@celery_app.task(name=ALIGN)
def align_segment(segment_id: str) -> None:
    """Keep a done segment's word times for its job's subtitles; a failure leaves the
    assembly's estimate for that segment (marked so in the manifest)."""
    try:
        alignment.align_segment(uuid.UUID(segment_id))
    except Exception:
        log.warning("segment.align_failed", segment_id=segment_id, exc_info=True)
    pipeline.drop_if_deleted(pipeline.job_of(uuid.UUID(segment_id)))


@celery_app.task(name=ASSEMBLE, bind=True)
def assemble(self: Task[Any, Any], job_id: str) -> None:
    """Assemble a job whose segments are all done.

    Storage errors are retried after RETRY_BACKOFF_SECONDS, doubling; after
    ASSEMBLY_MAX_ATTEMPTS the job fails (its parts stay until it is deleted).
    """
    structlog.contextvars.bind_contextvars(job_id=job_id)
    try:
        assembled = pipeline.assemble(uuid.UUID(job_id))
    except STORAGE_ERRORS as exc:
        settings = get_settings()
        attempt = self.request.retries + 1
        log.warning("assembly.storage_failed", job_id=job_id, attempt=attempt, error=repr(exc))
        if attempt < settings.assembly_max_attempts:
            raise self.retry(countdown=backoff(attempt, settings.retry_backoff_seconds),
                             max_retries=None, exc=exc) from exc
        if pipeline.fail_assembly(uuid.UUID(job_id), repr(exc), attempt):
            notify.apply_async((job_id,), queue=BATCH)
        return
    if pipeline.drop_if_deleted(uuid.UUID(job_id)):
        return
    for segment_id in assembled.again:  # a lost part or a misheard take: redone, then on
        synthesize.apply_async((str(segment_id),), queue=model_queues(assembled.model)[1])
    if assembled.outcome in ("completed", "failed"):
        notify.apply_async((job_id,), queue=BATCH)


@celery_app.task(name=NOTIFY, bind=True, max_retries=WEBHOOK_MAX_ATTEMPTS - 1)
def notify(self: Task[Any, Any], job_id: str) -> None:
    """Call the job's webhook; failures are retried after RETRY_BACKOFF_SECONDS, doubling."""
    structlog.contextvars.bind_contextvars(job_id=job_id)
    try:
        result = webhooks.notify(uuid.UUID(job_id))
    except outbound.RefusedURL as exc:  # now resolves somewhere private: never retried
        log.warning("webhook.refused", job_id=job_id, reason=str(exc))
        return
    except httpx.HTTPError as exc:
        delay = backoff(self.request.retries + 1, get_settings().retry_backoff_seconds)
        log.warning("webhook.failed", job_id=job_id, attempt=self.request.retries + 1,
                    error=repr(exc), retry_in=delay)
        raise self.retry(countdown=delay, exc=exc) from exc
    if result is not None:
        log.info("webhook.delivered", job_id=job_id, **result)


@celery_app.task(name=SPEAK)
def speak(payload: dict[str, Any]) -> None:
    """Answer one sync speech request on its channel."""
    structlog.contextvars.bind_contextvars(request_id=payload.get("request_id"))
    speech.speak(payload)
