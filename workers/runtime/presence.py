"""A worker's record in the registry: what it serves, its state, refreshed by a thread."""

import threading
import time

import structlog

from core.catalog import catalog
from core.queues import BATCH, REALTIME, model_queues
from core.registry import REFRESH_SECONDS, WorkerRecord, registry_for, worker_id
from workers.runtime.engine import partition
from workers.settings import get_settings

log = structlog.get_logger()


class Presence:
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
        gpu = settings.engine == "vllm-omni"
        self.slots = settings.pool_threads(gpu) if self.models else 0
        self.state = "warming"
        self.reason = ""
        self.id = worker_id()
        self.stopped = threading.Event()

    def publish(self) -> None:
        try:
            realtime = partition()
            self.registry.publish(WorkerRecord(self.id, self.state, self.queues, self.models,
                                               time.time(), self.reason,
                                               realtime.status if realtime else "",
                                               self.slots))
        except Exception:  # the registry is advisory: never let it stop the worker
            log.warning("worker.registry_failed", worker=self.id, exc_info=True)

    def refresh(self) -> None:
        while not self.stopped.wait(REFRESH_SECONDS):
            self.publish()
