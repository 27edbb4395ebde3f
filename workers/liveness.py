"""This worker's heartbeat in the database, refreshed by a thread while the process lives.

The reaper of any worker takes the running segments of a worker that has not beaten for
WORKER_DEAD_SECONDS for lost and hands them on at once, whatever their length. A worker that
stops cleanly removes its row; one that is killed leaves it to go stale.
"""

import threading

import structlog
from sqlalchemy import delete, insert, update

from core.registry import worker_id
from models import WorkerBeat, utcnow
from models.db import session_scope

log = structlog.get_logger()


def beat(worker: str) -> None:
    """Record that `worker` is alive now (one row per worker; only it writes its row)."""
    now = utcnow()
    with session_scope() as session:
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
