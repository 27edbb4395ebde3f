"""Dispatch: which waiting segments go on the broker, so that keys share the engines.

Planning a job no longer enqueues all its segments. They wait in the database, and
`dispatch` puts on a model's queue only what its workers can start soon: as many segments
as their slots (each worker's pool threads, from the registry), counted with those already
queued. Which ones is `models.segments.fair_job`'s order: a job's priority, then the key
with the fewest segments in flight, then that key's job with the fewest, then the oldest.
So a small job submitted behind a book waits for at most one queue's worth of segments,
not for the book, and one key with 10,000 jobs takes its share and no more.

Dispatch runs after a job is planned, after every segment a worker finishes or gives up
(a slot frees), and on every reaper pass. Several at once are safe: each takes segments with
one conditional statement (on Postgres skipping rows another is taking); a queue may then
hold a few more than its target, never fewer than needed. A dispatched segment carries its
dispatcher's worker id until a worker takes its message (pipeline.reserve): should the
dispatcher die between its commit and its send, the reaper's dead-worker sweep sends it
(WORKER_DEAD_SECONDS); a message lost otherwise (a broker restart) is sent again by the
forgotten-work sweep. Segments not yet dispatched are left to dispatch by both.
"""

import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from core.registry import WorkerRecord, worker_id
from models import segments as segment_state
from models import utcnow
from models.db import session_scope

log = structlog.get_logger()
FLOOR = 4  # queued ahead when no worker of the model says how many slots it has
CANDIDATES = 200  # jobs asked for a waiting segment, in fair order, before all of them are


def target(model: str, workers: Iterable[WorkerRecord]) -> int:
    """How many of `model`'s segments to keep on its queue: the slots of the live workers
    that consume it."""
    slots = sum(w.slots for w in workers
                if w.state != "failed" and any(m.id == model for m in w.models))
    return max(FLOOR, slots)


def waiting() -> list[str]:
    """The models with segments waiting for dispatch (jobs in progress)."""
    with session_scope() as session:
        return list(session.scalars(segment_state.waiting_models()).all())


def dispatch(model: str, wanted: int, send: Callable[[uuid.UUID], Any]) -> int:
    """Mark up to `wanted` minus what is queued of `model`'s waiting segments as dispatched,
    in fair order, commit, then `send` each; return how many were sent."""
    picked: list[uuid.UUID] = []
    with session_scope() as session:
        room = wanted - (session.scalar(segment_state.queued(model)) or 0)
        now, missed = utcnow(), 0
        while len(picked) < room and missed < 3:
            job = session.scalar(segment_state.fair_job(model, CANDIDATES)) or \
                session.scalar(segment_state.fair_job(model))
            if job is None:
                break
            segment = session.scalar(segment_state.dispatched(job, now, worker_id()))
            if segment is None:  # another dispatcher is taking that job's next one
                missed += 1
                continue
            picked.append(segment)
    for segment in picked:
        send(segment)
    if picked:
        log.debug("segments.dispatched", model=model, count=len(picked))
    return len(picked)


@dataclass
class _Turn:
    lock: threading.Lock = field(default_factory=threading.Lock)
    asked: bool = False


_turns: dict[str, _Turn] = {}
_turns_lock = threading.Lock()


def dispatch_in_turn(model: str, wanted: Callable[[], int],
                     send: Callable[[uuid.UUID], Any]) -> None:
    """Dispatch for `model` one pass at a time in this process: a thread that asks while a
    pass runs leaves the work to it, and it goes round once more.

    A GPU ends a wave of segments together (64 of the same length finish in one step), and
    every one of their threads asks for dispatch at once. Each pass took its segments in
    order, but their sends interleaved on the broker, so a book's segments started out of
    order: on an H100 its first playable fragment, which needs segment 0, came 20 s after
    its first finished segment, and the queue held several times its target. Passes in turn
    send in order, and each counts what the one before queued. (Workers of other processes
    still dispatch beside this one: each pass is safe against them, as `dispatch` says.)
    """
    with _turns_lock:
        turn = _turns.setdefault(model, _Turn())
    turn.asked = True  # before trying the lock: a holder reads it after it lets go
    while turn.asked and turn.lock.acquire(blocking=False):
        try:
            turn.asked = False
            dispatch(model, wanted(), send)
        finally:
            turn.lock.release()
