"""A worker process's life: start-up, consuming, shutdown, recycling.

One `WorkerProcess` per process (`workers.tasks` holds it and connects Celery's signals to its
methods). What a start or a shutdown must do to jobs (start the reaper, hand segments back,
answer sync speech, warm the text splitter) comes in as `Hooks`, so this room knows nothing of
jobs or books.
"""

import atexit
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from core import metrics, tracing
from core.queues import split_queues
from core.registry import WorkerRecord, registry_for, worker_id
from workers.engines import Engine
from workers.runtime import recycle
from workers.runtime.engine import get_engine, loaded_engine, partition, start_partition
from workers.runtime.lane import RealtimeLane
from workers.runtime.liveness import Heart, mark_ready
from workers.runtime.presence import Presence
from workers.runtime.warmup import warm_up, warm_up_realtime
from workers.settings import get_settings

log = structlog.get_logger()
STARTUP_FAILED_EXIT = 3  # the worker's exit status when its start fails (its engine too)


@dataclass(frozen=True)
class Hooks:
    """What the worker's life does to work it does not own (given by workers.tasks)."""

    before_engine: Callable[[], None]  # imports and first calls to make before any task
    ready: Callable[[], None]  # the engine is warm: start what recovers work (the reaper)
    speak: Callable[[dict[str, Any]], None]  # answer one sync request (the realtime lane)
    hand_back: Callable[[], None]  # shutdown grace is over: hand held segments back
    connection: Callable[[], Any]  # a broker connection for the realtime lane


class WorkerProcess:
    """This process's presence, heartbeat, busy meter, realtime lane and recycler."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self.presence: Presence | None = None
        self.busy: metrics.BusyMeter | None = None
        self.lane: RealtimeLane | None = None
        self.heart: Heart | None = None
        self.recycler: recycle.Recycler | None = None
        self.consumed = False  # Celery has consumed: a stop on its error restarts the worker
        self.stopping = False  # a signal (SIGTERM, SIGINT, a recycle) stops the worker

    def start(self) -> None:
        """Start the worker: registry, heartbeat, reaper, and the engine warmed up, before it
        takes tasks (solo/threads pools). The worker consumes nothing until this returns.

        Any failure here ends the worker with status STARTUP_FAILED_EXIT before it consumes
        anything, its registry record saying why (/readyz lists it); the process supervisor
        (compose's restart policy, Kubernetes) restarts it with backoff. Celery would log an
        exception from its worker_init handler and consume anyway: a worker that said it was
        ready but never registered, while others took its work.
        """
        try:
            self._start()
        except SystemExit:
            raise
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"[:1000]
            log.error("worker.start_failed", reason=reason, exc_info=True)
            self._failed(reason)
            raise SystemExit(STARTUP_FAILED_EXIT) from exc

    def _start(self) -> None:
        log.info("worker.initialising")  # Celery has started (a restart's timeline)
        settings = get_settings()
        tracing.setup("narrator-worker")  # before the engines and the task signals
        mark_ready(settings.ready_file, False)  # a previous run's, in the same container
        self.recycler = recycle.Recycler(settings.worker_max_tasks, settings.worker_max_rss_mb)
        self.heart = Heart(settings.worker_heartbeat_seconds)
        self.heart.start()  # before any claim: a segment's worker must be seen alive
        self.presence = presence = Presence()
        self.busy = metrics.BusyMeter(presence.id)
        self.busy.start()
        if settings.metrics_port:
            metrics.serve(settings.metrics_port)
        presence.publish()
        threading.Thread(target=presence.refresh, name="registry", daemon=True).start()
        self.hooks.before_engine()
        engine = get_engine() if presence.models else None
        if engine is not None:
            warm_up(engine, settings)
        presence.state = "ready"
        presence.publish()
        self.hooks.ready()
        lane_queues = split_queues(list(presence.queues))[1]
        if lane_queues:
            self.lane = RealtimeLane(self.hooks.connection(), lane_queues,
                                     settings.realtime_lane_threads, self.hooks.speak)
            self.lane.start()
            if engine is not None:  # the lane gets an engine of its own once it is warm
                start_partition(lambda e: warm_up_realtime(e, settings), presence.publish)
        if engine is not None:
            log.info("engine.ready", engine=engine.info.engine, model=engine.info.id)
        else:
            log.info("worker.ready", queues=list(presence.queues), engine=None)

    def _failed(self, reason: str) -> None:
        """Publish a failed record (a bare one if the start failed before the presence
        existed) and stop what was started."""
        settings = get_settings()
        try:
            if self.presence is not None:
                self.presence.stopped.set()
                self.presence.state, self.presence.reason = "failed", reason
                self.presence.publish()
            else:
                registry_for(settings).publish(WorkerRecord(
                    worker_id(), "failed",
                    tuple(q for q in settings.worker_queues.split(",") if q),
                    (), time.time(), reason))
        except Exception:
            log.warning("worker.registry_failed", exc_info=True)
        self._close_engines()
        if self.heart is not None:
            self.heart.stop()

    def consuming(self) -> None:
        """Say so to the supervisor (READY_FILE) once the engine is warm and Celery consumes;
        from now on SIGHUP recycles the worker (Celery's own SIGHUP handler, set as it
        starts, would exec sys.argv, which is not how `narrator worker` was started)."""
        self.consumed = True
        mark_ready(get_settings().ready_file, True)
        signal.signal(signal.SIGHUP, self._recycle_on_sighup)

    def celery_failed(self, code: int) -> None:
        """Celery stops the worker on an error of its own ("Unrecoverable error", exit
        status `code`): restart this worker as a recycle does, so no supervisor is needed.

        Such an error is a race inside Celery or kombu, not the work's: in CI a Redis
        restart mid-job raised kombu's AttributeError ('NoneType' ... 'hostname') while the
        consumer reconnected, and the worker's process stayed up, consuming nothing, its job
        stuck. Here its warm shutdown runs as on SIGTERM, within the grace period, then a
        fresh image of the worker starts (exec: same pid; a GPU engine's child is adopted).
        """
        if not self.consumed or self.stopping:  # a failed start exits (STARTUP_FAILED_EXIT);
            return  # Ctrl-C and SIGQUIT stop Celery with a failing status too
        if self.recycler is not None:
            self.recycler.force()
        log.error("worker.celery_failed", code=code, action="restarting")
        atexit.register(recycle.restart)  # after the shutdown below has finished
        self.shutting_down()  # should the shutdown hang, the grace period ends it

    def task_started(self) -> None:
        if self.busy is not None:
            self.busy.begin()

    def task_ended(self) -> None:
        if self.busy is not None:
            self.busy.end()
        if self.recycler is not None and (reason := self.recycler.task_done()):
            self._recycle(reason)

    def _recycle(self, reason: str) -> None:
        """Stop as on SIGTERM, then exec a fresh image of this worker (runtime/recycle.py);
        the engine's child process stays up for it (leave detaches it)."""
        log.warning("worker.recycling", reason=reason)
        atexit.register(recycle.restart)  # after the warm shutdown below has finished
        os.kill(os.getpid(), signal.SIGTERM)

    def _recycle_on_sighup(self, _signum: int, _frame: Any) -> None:
        """SIGHUP: recycle now (an operator's `kill -HUP`), as WORKER_MAX_TASKS would."""
        if self.recycler is not None and self.recycler.force():
            self._recycle("SIGHUP")

    def shutting_down(self) -> None:
        """On SIGTERM: stop taking sync requests now, and start the grace period's clock.

        Celery's warm shutdown stops consuming and waits for the tasks in flight; if they
        have not finished within WORKER_SHUTDOWN_GRACE_SECONDS (a GPU worker holds 64
        segments of up to tens of seconds each), the worker hands them back and exits
        without waiting.
        """
        self.stopping = True
        mark_ready(get_settings().ready_file, False)
        if self.lane is not None:
            self.lane.should_stop = True
        grace = get_settings().worker_shutdown_grace_seconds
        threading.Thread(target=self._hand_back_after, args=(grace,), name="shutdown-grace",
                         daemon=True).start()

    def _hand_back_after(self, grace: float) -> None:
        time.sleep(grace)  # a worker that finishes its tasks first has exited by now
        try:
            self.hooks.hand_back()
        except Exception:  # the database or broker is down: the reaper hands them on instead
            log.exception("worker.hand_back_failed")
        self.leave(finish=False)
        if self.recycler is not None and self.recycler.due:
            self._detach_engines()
            recycle.restart()
        os._exit(0)  # the engine's child sees its parent go and shuts the engine down

    def leave(self, finish: bool = True) -> None:
        """Leave the registry and the workers table; with `finish`, after the realtime
        lane's requests and the engine have stopped (a warm shutdown)."""
        mark_ready(get_settings().ready_file, False)
        if self.lane is not None and finish:
            self.lane.stop()
        if self.busy is not None:
            self.busy.stop()
        metrics.process_exited(os.getpid())
        if self.presence is not None:
            self.presence.stopped.set()
            if self.presence.state != "failed":  # a failed worker's record says why
                with contextlib.suppress(Exception):
                    self.presence.registry.remove(self.presence.id)
        if finish and self.recycler is not None and self.recycler.due:
            self._detach_engines()  # the next image of this process takes it over
        if finish:
            self._close_engines()  # its GPU processes stop with it (after a detach: none)
        if self.heart is not None:  # after the pool has finished: this worker holds none
            self.heart.stop()

    def _close_engines(self) -> None:
        for engine in engines():
            close = getattr(engine, "close", None)
            if close is not None:
                close()

    def _detach_engines(self) -> None:
        """Leave the engines' children running for the recycled image, which adopts them."""
        for engine in engines():
            detach = getattr(engine, "detach", None)
            if detach is not None:
                detach()


def engines() -> list[Engine]:
    """Return the engines this worker has loaded: its own, then its realtime partition's
    (not while that one is still starting: its start holds the engine's lock, and its child
    ends by itself once this process has gone)."""
    loaded = [e for e in (loaded_engine(),) if e is not None]
    realtime = partition()
    if realtime is not None and realtime.state != "starting":
        loaded.append(realtime.realtime)
    return loaded
