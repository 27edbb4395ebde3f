"""This worker's heartbeat in the database, refreshed by a thread while the process lives.

Each beat also refreshes the heartbeat of the segments this worker is running right now
(`holding`), so the reaper of any worker takes a running segment whose heartbeat is older
than WORKER_DEAD_SECONDS for lost, whatever its length: its worker died, or gave it up
without being able to say so (a database outage at the wrong moment). A worker that stops
cleanly removes its row; one that is killed leaves it to go stale.
"""

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog
from sqlalchemy import delete, insert, update

from core.registry import worker_id
from models import WorkerBeat, utcnow
from models import segments as segment_state
from models.db import session_scope

log = structlog.get_logger()
_held: set[uuid.UUID] = set()
_held_lock = threading.Lock()


@contextmanager
def holding(segment_id: uuid.UUID) -> Iterator[None]:
    """Keep a running segment's heartbeat fresh while the block runs."""
    with _held_lock:
        _held.add(segment_id)
    try:
        yield
    finally:
        with _held_lock:
            _held.discard(segment_id)


def mark_ready(path: str, ready: bool) -> None:
    """Create `path` when the worker takes work, remove it when it stops ('' does nothing).

    A supervisor's readiness probe tests for it (Kubernetes: `test -f`): a rolling update
    then waits for a new worker's engine to be warm before it stops an old one.
    """
    if path and ready:
        Path(path).touch()
    elif path:
        Path(path).unlink(missing_ok=True)


def beat(worker: str) -> None:
    """Record that `worker`, and each segment it runs, is alive now."""
    now = utcnow()
    with _held_lock:
        held = list(_held)
    with session_scope() as session:
        if held:
            session.execute(segment_state.beaten(held, worker, now))
        if not session.execute(update(WorkerBeat).where(WorkerBeat.id == worker)
                               .values(heartbeat_at=now)).rowcount:  # type: ignore[attr-defined]
            session.execute(insert(WorkerBeat).values(id=worker, started_at=now,
                                                      heartbeat_at=now))


class Heart:
    """Beats every `interval` seconds in a daemon thread until stopped."""

    def __init__(self, interval: float) -> None:
        self.id = worker_id()
        self.interval = interval
        self._stop = threading.Event()

    def start(self) -> None:
        """Beat once now (before the worker takes work), then on a timer."""
        beat(self.id)
        threading.Thread(target=self._run, name="heartbeat", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                beat(self.id)
            except Exception:  # a database blip: the next beat tries again
                log.warning("worker.heartbeat_failed", worker=self.id, exc_info=True)

    def stop(self) -> None:
        """Stop beating and remove the row (a clean stop holds no segment)."""
        self._stop.set()
        try:
            with session_scope() as session:
                session.execute(delete(WorkerBeat).where(WorkerBeat.id == self.id))
        except Exception:
            log.warning("worker.heartbeat_remove_failed", worker=self.id, exc_info=True)
