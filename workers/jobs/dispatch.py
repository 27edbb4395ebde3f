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

import uuid
from collections.abc import Callable, Iterable
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
