"""The realtime partition: a second, small engine on the same GPU for sync and streamed speech.

One engine batches everything: a realtime request's talker steps carry every batch segment
in flight (64 on a GPU worker; a step then takes 33-45 ms on an H100), and Code2Wav decodes
whole segments between its windows. Under three jobs, streamed first audio through HTTP was
241-261 ms at the median and 633-697 ms at p99 on an H100, against 47-59 ms for the idle
engine. Priorities and schedulers inside one engine cannot take the batch out of a step.

So a GPU worker runs a second engine of the same checkpoint (VLLM_REALTIME_ENGINE; its deploy
config has 16 sequences and a quarter of the GPU's memory) that only the realtime lane uses:
its steps carry realtime requests and nothing else, and the GPU time-slices between the two
engines' processes. It starts in the background once the batch engine is warm and the worker
consumes, so a restart is ready no later than before; until it is warm, or when it has failed
or its process has died, the lane's requests go to the batch engine, at realtime priority, as
they did before it existed. A partition whose process dies is started again, at most once per
RESTART_SECONDS. While the batch engine's process is down (it crashed and is starting again,
about a minute), the partition answers even an idle lane.
"""

import threading
import time
from collections.abc import Callable

import structlog

from workers.engines import Engine

log = structlog.get_logger()
RESTART_SECONDS = 60.0
STARTING, READY, FAILED = "starting", "ready", "failed"


class Partition:
    """The realtime engine beside a batch engine, and which of the two answers now."""

    def __init__(self, batch: Engine, realtime: Engine, warm: Callable[[Engine], None],
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.batch, self.realtime = batch, realtime
        self._warm, self._on_change = warm, on_change
        self.state, self.reason = STARTING, ""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started_at = float("-inf")

    @property
    def status(self) -> str:
        """Return the state as the registry records it ("failed: reason" when failed)."""
        return f"{FAILED}: {self.reason}" if self.state == FAILED else self.state

    def start(self) -> None:
        """Start and warm the realtime engine in a background thread (once at a time)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._started_at = time.monotonic()
            self._thread = threading.Thread(target=self._start, name="realtime-engine",
                                            daemon=True)
            self._thread.start()

    def _start(self) -> None:
        self._set(STARTING)
        started = time.perf_counter()
        try:
            self.realtime.start()
            self._warm(self.realtime)
        except Exception as exc:  # the batch engine goes on answering the lane
            self._set(FAILED, f"{type(exc).__name__}: {exc}"[:500])
            log.error("engine.realtime_failed", reason=self.reason)
            return
        self._set(READY)
        log.info("engine.realtime_ready", seconds=round(time.perf_counter() - started, 1))

    def _set(self, state: str, reason: str = "") -> None:
        self.state, self.reason = state, reason
        try:
            self._on_change()
        except Exception:  # the registry is advisory
            log.warning("engine.realtime_publish_failed", exc_info=True)

    def engine(self) -> Engine:
        """Return the engine a realtime request goes to now: the partition while the batch
        engine holds batch work or its process is down (crashed, starting again), else the
        batch engine (idle, its first audio came sooner: 48 ms against 68 ms inside the
        engine on an H100)."""
        if self.state == READY:
            if not getattr(self.batch, "batch_in_flight", 1) and \
                    getattr(self.batch, "running", True):
                return self.batch
            if getattr(self.realtime, "running", True):
                return self.realtime
            log.error("engine.realtime_lost")  # its process died: start it again
            self._set(STARTING)
        if self.state == STARTING and time.monotonic() - self._started_at > RESTART_SECONDS:
            self.start()
        return self.batch

    def join(self, timeout: float | None = None) -> None:
        """Wait for a start in progress (tests; shutdown waits for none)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
