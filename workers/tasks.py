"""Celery tasks: thin wrappers that take ids, call the pipeline and enqueue after commit."""

import atexit
import contextlib
import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import structlog
from celery import Task
from celery.signals import (
    task_postrun,
    task_prerun,
    task_received,
    worker_init,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from core import metrics, outbound, queues, tracing
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
    REALTIME,
    SPEAK,
    SYNTHESIZE,
    model_queues,
    split_queues,
)
from core.registry import REFRESH_SECONDS, WorkerRecord, registry_for, worker_id
from storage import STORAGE_ERRORS
from workers import speech
from workers.app import celery_app
from workers.book import alignment, progressive
from workers.engines import Engine, SpeechRequest
from workers.jobs import pipeline, reaper, webhooks
from workers.runtime import recycle
from workers.runtime.engine import get_engine, loaded_engine, partition, start_partition
from workers.runtime.lane import RealtimeLane
from workers.runtime.liveness import Heart, mark_ready
from workers.settings import WorkerSettings, get_settings

log = structlog.get_logger()


class _Presence:
    """This worker's record in the registry, refreshed by a daemon thread."""

    def __init__(self) -> None:
        settings = get_settings()
        self.registry = registry_for(settings)
        self.queues = tuple(q for q in settings.worker_queues.split(",") if q)
        # The models whose queues this worker consumes (all, when it was given none): a
        # worker that takes only shared queues (`--queues assembly`) serves no model, and
        # reads no catalogue (it needs no engine's package, not even Piper's voice).
        serves = not self.queues or any(q.startswith((f"{REALTIME}.", f"{BATCH}."))
                                        for q in self.queues)
        self.models = tuple(m for m in catalog(settings) if not self.queues
                            or set(model_queues(m.id)) & set(self.queues)) if serves else ()
        self.state = "warming"
        self.reason = ""
        self.id = worker_id()
        self.stopped = threading.Event()

    def publish(self) -> None:
        try:
            realtime = partition()
            self.registry.publish(WorkerRecord(self.id, self.state, self.queues, self.models,
                                               time.time(), self.reason,
                                               realtime.status if realtime else ""))
        except Exception:  # the registry is advisory: never let it stop the worker
            log.warning("worker.registry_failed", worker=self.id, exc_info=True)

    def refresh(self) -> None:
        while not self.stopped.wait(REFRESH_SECONDS):
            self.publish()


_presence: _Presence | None = None
_busy: metrics.BusyMeter | None = None
_lane: RealtimeLane | None = None
_heart: Heart | None = None
_recycler: recycle.Recycler | None = None
STARTUP_FAILED_EXIT = 3  # the worker's exit status when its start fails (its engine too)
WEBHOOK_MAX_ATTEMPTS = 11


@task_prerun.connect
def _task_started(task_id: str, task: Task[Any, Any], **_: Any) -> None:
    """Every log line of a task carries its name and id (segments add job_id and segment)."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task=task.name, task_id=task_id)
    if _busy is not None:
        _busy.begin()


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
    if _busy is not None:
        _busy.end()
    structlog.contextvars.clear_contextvars()
    if _recycler is not None and (reason := _recycler.task_done()):
        _recycle(reason)


def _recycle(reason: str) -> None:
    """Stop as on SIGTERM, then exec a fresh image of this worker (workers/runtime/recycle.py);
    the engine's child process stays up for it (_leave detaches it)."""
    log.warning("worker.recycling", reason=reason)
    atexit.register(recycle.restart)  # after the warm shutdown below has finished
    os.kill(os.getpid(), signal.SIGTERM)


def _recycle_on_sighup(_signum: int, _frame: Any) -> None:
    """SIGHUP: recycle now (an operator's `kill -HUP`), as WORKER_MAX_TASKS would."""
    if _recycler is not None and _recycler.force():
        _recycle("SIGHUP")


def warm_up(engine: Engine, settings: WorkerSettings) -> None:
    """Run the engine through the shapes a job and sync speech use, before taking work.

    On vLLM-Omni: a full batch (VLLM_WARMUP_BATCH, default the in-flight bound) of whole
    requests through both stages at segment length, and at the same time
    VLLM_REALTIME_SEQUENCES streamed realtime requests, so the engine meets every batch size
    up to its deploy config's max_num_seqs before the first job does. On the H100, the first
    realtime requests beside a full batch met a Triton compile (392 ms to first audio)
    when the warm-up stopped at the batch.
    """
    voice = engine.info.voices[0].id if engine.info.voices else ""
    if not voice:
        engine.start()
        return
    if engine.info.engine != "vllm-omni":
        engine.synthesize([SpeechRequest(text="Ready.", voice=voice)])
        return
    engine.start()
    if served := getattr(engine, "served_before", 0):  # a recycle adopted a warm engine
        log.info("engine.warm_up_skipped", served=served)
        return
    _warm(engine, settings, settings.vllm_warmup_batch or settings.vllm_max_in_flight,
          realtime=False)


def warm_up_realtime(engine: Engine, settings: WorkerSettings) -> None:
    """Warm the realtime partition (workers/runtime/partition.py): VLLM_REALTIME_SEQUENCES whole
    answers and as many streamed ones at once, every batch size its deploy config has."""
    if served := getattr(engine, "served_before", 0):  # a recycle adopted it, warm
        log.info("engine.warm_up_skipped", served=served, partition="realtime")
        return
    _warm(engine, settings, settings.vllm_realtime_sequences, realtime=True)


def _warm(engine: Engine, settings: WorkerSettings, batch: int, realtime: bool) -> None:
    """Run `batch` whole requests and VLLM_REALTIME_SEQUENCES streamed ones at once."""
    voice = engine.info.voices[0].id
    request = SpeechRequest(text=WARM_UP_TEXT, voice=voice,
                            max_new_tokens=settings.vllm_warmup_tokens, realtime=realtime)
    streams = settings.vllm_realtime_sequences
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1 + streams, thread_name_prefix="warm-up") as pool:
        whole = pool.submit(engine.synthesize, [replace(request, request_id=f"warm-up-{n}")
                                                for n in range(batch)])
        streamed = [pool.submit(lambda n: list(engine.stream(replace(
            request, request_id=f"warm-up-stream-{n}", realtime=True))), n)
            for n in range(streams)]
        for future in [whole, *streamed]:
            future.result()
    log.info("engine.warmed_up", batch=batch, streams=streams, realtime=realtime,
             frames=settings.vllm_warmup_tokens, seconds=round(time.perf_counter() - started, 1))


WARM_UP_TEXT = ("The warm-up runs every shape of work once, so that the first job after a "
                "start runs as fast as the ones after it.")


@worker_init.connect
def _warm_engine(**_: Any) -> None:
    """Start the worker: registry, heartbeat, reaper, and the engine warmed up, before it
    takes tasks (solo/threads pools). The worker consumes nothing until this returns.

    Any failure here ends the worker with status STARTUP_FAILED_EXIT before it consumes
    anything, its registry record saying why (/readyz lists it); the process supervisor
    (compose's restart policy, Kubernetes) restarts it with backoff. Celery would log an
    exception from this handler and consume anyway: a worker that said it was ready but
    never registered, while others took its work.
    """
    try:
        _start()
    except SystemExit:
        raise
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"[:1000]
        log.error("worker.start_failed", reason=reason, exc_info=True)
        _failed(reason)
        raise SystemExit(STARTUP_FAILED_EXIT) from exc


def _failed(reason: str) -> None:
    """Publish a failed record (a bare one if the start failed before the presence existed)
    and stop what was started."""
    settings = get_settings()
    try:
        if _presence is not None:
            _presence.stopped.set()
            _presence.state, _presence.reason = "failed", reason
            _presence.publish()
        else:
            registry_for(settings).publish(WorkerRecord(
                worker_id(), "failed", tuple(q for q in settings.worker_queues.split(",") if q),
                (), time.time(), reason))
    except Exception:
        log.warning("worker.registry_failed", exc_info=True)
    for engine in _engines():
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    if _heart is not None:
        _heart.stop()


def _start() -> None:
    """What _warm_engine guards (its docstring)."""
    global _presence, _busy, _lane, _heart, _recycler
    log.info("worker.initialising")  # Celery has started (a restart's timeline)
    settings = get_settings()
    tracing.setup("narrator-worker")  # before the engines and the task signals
    mark_ready(settings.ready_file, False)  # a previous run's, in the same container
    _recycler = recycle.Recycler(settings.worker_max_tasks, settings.worker_max_rss_mb)
    _heart = Heart(settings.worker_heartbeat_seconds)
    _heart.start()  # before any claim: a segment's worker must be seen alive
    _presence = _Presence()
    _busy = metrics.BusyMeter(_presence.id)
    _busy.start()
    metrics.zero([m.id for m in _presence.models], [*reaper.SWEEPS, "expired"])
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    _presence.publish()
    threading.Thread(target=_presence.refresh, name="registry", daemon=True).start()
    # pysbd's import and first split, before any task needs them: sync speech splits its
    # text on vLLM-Omni (on the H100 the first streamed request after the warm-up took
    # 178-195 ms, 53 ms after it, with pysbd's modules compiling at that moment), and an
    # assembly worker imported it in its first book's assembly (its cues).
    speech.groups(WARM_UP_TEXT + " " + WARM_UP_TEXT, "en", 2)
    engine = get_engine() if _presence.models else None
    if engine is not None:
        warm_up(engine, settings)
    _presence.state = "ready"
    _presence.publish()
    reaper.start(settings.reaper_interval_seconds, settings.segment_stale_seconds, _enqueue,
                 settings.segment_max_attempts, settings.retry_backoff_seconds,
                 settings.worker_dead_seconds)
    lane_queues = split_queues(list(_presence.queues))[1]
    if lane_queues:
        _lane = RealtimeLane(celery_app.connection_for_read(), lane_queues,
                             settings.realtime_lane_threads, speech.speak)
        _lane.start()
        if engine is not None:  # the lane gets an engine of its own once it is warm
            start_partition(lambda e: warm_up_realtime(e, settings), _presence.publish)
    if engine is not None:
        log.info("engine.ready", engine=engine.info.engine, model=engine.info.id)
    else:
        log.info("worker.ready", queues=list(_presence.queues), engine=None)


@worker_ready.connect
def _consuming(**_: Any) -> None:
    """Say so to the supervisor (READY_FILE) once the engine is warm and Celery consumes;
    from now on SIGHUP recycles the worker (Celery's own SIGHUP handler, set as it starts,
    would exec sys.argv, which is not how `narrator worker` was started)."""
    mark_ready(get_settings().ready_file, True)
    signal.signal(signal.SIGHUP, _recycle_on_sighup)


@worker_shutting_down.connect
def _shutting_down(**_: Any) -> None:
    """On SIGTERM: stop taking sync requests now, and start the grace period's clock.

    Celery's warm shutdown stops consuming and waits for the tasks in flight; if they have
    not finished within WORKER_SHUTDOWN_GRACE_SECONDS (a GPU worker holds 64 segments of up
    to tens of seconds each), the worker hands them back and exits without waiting.
    """
    mark_ready(get_settings().ready_file, False)
    if _lane is not None:
        _lane.should_stop = True
    grace = get_settings().worker_shutdown_grace_seconds
    threading.Thread(target=_hand_back_after, args=(grace,), name="shutdown-grace",
                     daemon=True).start()


def _hand_back_after(grace: float) -> None:
    time.sleep(grace)  # a worker that finishes its tasks first has exited by now
    try:
        held = pipeline.hand_back()
        for segment_id, model in held:
            _enqueue(SYNTHESIZE, str(segment_id), model, 0.0)
        log.warning("worker.handed_back", segments=len(held), grace_seconds=grace)
    except Exception:  # the database or broker is down: the reaper hands them on instead
        log.exception("worker.hand_back_failed")
    _leave(finish=False)
    if _recycler is not None and _recycler.due:
        _detach_engine()
        recycle.restart()
    os._exit(0)  # the engine's child sees its parent go and shuts the engine down


def _detach_engine() -> None:
    """Leave the engine's child running for the recycled image, which adopts it."""
    for engine in _engines():
        detach = getattr(engine, "detach", None)
        if detach is not None:
            detach()


def _engines() -> list[Engine]:
    """Return the engines this worker has loaded: its own, then its realtime partition's
    (not while that one is still starting: its start holds the engine's lock, and its child
    ends by itself once this process has gone)."""
    engines = [e for e in (loaded_engine(),) if e is not None]
    realtime = partition()
    if realtime is not None and realtime.state != "starting":
        engines.append(realtime.realtime)
    return engines


@worker_shutdown.connect
def _leave(finish: bool = True, **_: Any) -> None:
    """Leave the registry and the workers table; with `finish`, after the realtime lane's
    requests and the engine have stopped (a warm shutdown)."""
    mark_ready(get_settings().ready_file, False)
    if _lane is not None and finish:
        _lane.stop()
    if _busy is not None:
        _busy.stop()
    metrics.process_exited(os.getpid())
    if _presence is not None:
        _presence.stopped.set()
        if _presence.state != "failed":  # a failed worker's record says why it stopped
            with contextlib.suppress(Exception):
                _presence.registry.remove(_presence.id)
    if finish and _recycler is not None and _recycler.due:
        _detach_engine()  # the next image of this process takes it over
    for engine in _engines() if finish else []:
        close = getattr(engine, "close", None)
        if close is not None:  # stop its GPU processes with the worker (after a detach: none)
            close()
    if _heart is not None:  # after the pool has finished its tasks: this worker holds none
        _heart.stop()


def assembly_queue() -> str:
    """Return where assembly goes now (core.queues.assembly_queue over the registry)."""
    registry = _presence.registry if _presence is not None else registry_for(get_settings())
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


def _enqueue(task: str, item_id: str, model: str, countdown: float) -> None:
    """Send a task by name to the queue it belongs on (the reaper's re-enqueue)."""
    queue = model_queues(model)[1] if task == SYNTHESIZE else \
        assembly_queue() if task == ASSEMBLE else BATCH
    celery_app.send_task(task, args=[item_id], queue=queue, countdown=countdown or None)


@celery_app.task(name=PLAN)
def plan(job_id: str) -> None:
    """Plan a job and enqueue its segments."""
    structlog.contextvars.bind_contextvars(job_id=job_id)
    model, ids = pipeline.plan(uuid.UUID(job_id))
    if ids == [uuid.UUID(job_id)]:
        assemble.apply_async((job_id,), queue=assembly_queue())
        return
    queue = model_queues(model)[1]  # only workers serving the job's model take its segments
    for segment_id in ids:
        synthesize.apply_async((str(segment_id),), queue=queue)


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
    """Synthesise one segment; the last one to finish enqueues assembly."""
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
