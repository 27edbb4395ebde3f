"""The realtime lane: sync speech gets a consumer and threads that batch work never holds.

Celery's pool takes whatever message comes next into any free thread, so a GPU worker whose
threads all hold batch segments leaves sync requests on the broker until a segment ends
(measured on an H100: a streamed request waited 9.8 s behind a 128-segment job). Here the
realtime queues have a kombu consumer of their own, in a thread of the worker process, and
a small pool of threads only they use; on vLLM-Omni their requests also skip the batch
in-flight bound and go first by priority.

A message is taken only when a lane thread is free (others stay on the broker for other
workers) and acknowledged as it starts: a sync request is answered now or never, so one
that was running when its worker died is not replayed after the caller has given up.
Messages past their `expires` (the API sets the sync timeout) are dropped unread.
"""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import structlog
from kombu import Connection, Queue
from kombu.mixins import ConsumerMixin

from core import tracing
from core.queues import SPEAK

log = structlog.get_logger()
Handler = Callable[[dict[str, Any]], None]


def expired(headers: dict[str, Any], now: datetime | None = None) -> bool:
    """Say whether a Celery task message's `expires` header has passed."""
    expires = headers.get("expires")
    if not expires:
        return False
    moment = datetime.fromisoformat(expires)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment < (now or datetime.now(UTC))


class RealtimeLane(ConsumerMixin):
    """Consumes the realtime queues into `threads` threads of their own."""

    def __init__(self, connection: Connection, queues: list[str], threads: int,
                 handler: Handler) -> None:
        self.connection = connection
        self.queues = [Queue(name) for name in queues]
        self.handler = handler
        self.threads = threads
        self._free = threading.BoundedSemaphore(threads)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="realtime")
        self._thread: threading.Thread | None = None

    def get_consumers(self, consumer: Any, channel: Any) -> list[Any]:
        """One consumer over every realtime queue, holding at most one message unstarted."""
        return [consumer(queues=self.queues, callbacks=[self.on_message], accept=["json"],
                         prefetch_count=1)]

    def on_message(self, body: Any, message: Any) -> None:
        """Start one sync request in a lane thread (waiting here for one to be free)."""
        self._free.acquire()
        message.ack()
        task = message.headers.get("task")
        if task != SPEAK or expired(message.headers):
            self._free.release()
            log.warning("realtime.dropped", task=task, reason="expired" if task else "unknown")
            return
        args, _, _ = body
        self._pool.submit(self._run, args[0], dict(message.headers))

    def _run(self, payload: dict[str, Any], headers: dict[str, Any]) -> None:
        try:
            structlog.contextvars.clear_contextvars()
            structlog.contextvars.bind_contextvars(task=SPEAK,
                                                   request_id=payload.get("request_id"))
            # The API's trace, carried in the message's headers (no Celery task runs here).
            with tracing.consumed("realtime.speak", headers,
                                  request_id=payload.get("request_id", "")):
                self.handler(payload)
        except Exception:  # the handler answers the caller itself; never lose the lane
            log.exception("realtime.failed", request_id=payload.get("request_id"))
        finally:
            self._free.release()

    def start(self) -> None:
        """Consume in a daemon thread (kombu reconnects after broker outages)."""
        self._thread = threading.Thread(target=self.run, name="realtime-lane", daemon=True)
        self._thread.start()
        log.info("realtime.started", queues=[q.name for q in self.queues], threads=self.threads)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop taking requests and finish the ones running (warm shutdown)."""
        self.should_stop = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=True)
