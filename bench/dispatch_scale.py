"""What dispatch costs as active jobs grow: the database work that runs each time a segment
finishes (pick the fairest jobs, mark their next segments dispatched), a reaper pass, and the
/metrics count of waiting segments, with 100 to 10,000 jobs in progress.

A harness, not the product: it calls workers.jobs.dispatch and the reaper in one process on
a database filled directly (no API, no Celery, no engine); what it isolates is the SQL
dispatch adds per finished segment, which the product runs on top of a segment's own work
(1-2 s of Piper on this machine, bench.worker_overhead).

    python -m bench.dispatch_scale [--jobs 100,1000,10000] [--segments 10] [--keys 10]
                                   [--database-url postgresql://...]  # else SQLite

Writes bench/results/dispatch_scale_<database>.json. The rows share one database: the
10,000-job row runs with the earlier rows' jobs still in progress too.
"""

import argparse
import os
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, delete, insert, select, text, update

from bench.common import save, table

SLOTS = 64  # a GPU worker's in flight
HOUR = timedelta(hours=1)  # this process's heartbeat stays fresh for the whole run


def fill(engine: Engine, model: str, jobs: int, segments: int, keys: int) -> None:
    """`jobs` jobs in progress of `keys` keys, each with `segments` segments waiting."""
    from models import Job, Segment, utcnow, uuid7

    now = utcnow()
    for start in range(0, jobs, 500):
        rows, parts = [], []
        for n in range(start, min(jobs, start + 500)):
            job_id = uuid7()
            rows.append({"id": job_id, "owner": f"key-{n % keys}", "status": "in_progress",
                         "model": model, "voice": "joe", "response_format": "wav",
                         "speed": 1.0, "options": {}, "chapters": [], "metadata": {},
                         "input_characters": segments, "segments_total": segments,
                         "segments_done": 0, "segments_failed": 0, "audio_seconds": 0.0,
                         "created_at": now, "updated_at": now, "chars_done": 0})
            parts += [{"id": uuid7(), "job_id": job_id, "index": i, "chapter": 0,
                       "text": "Hello.", "pause_after": 0.0, "status": "pending",
                       "attempts": 0} for i in range(segments)]
        with engine.begin() as connection:
            connection.execute(insert(Job.metadata.tables["jobs"]), rows)
            connection.execute(insert(Segment.metadata.tables["segments"]), parts)


def finish_oldest(engine: Engine, model: str) -> None:
    """The oldest dispatched segment of `model` is done: a slot frees."""
    from models import Job, Segment

    with engine.begin() as connection:
        oldest = connection.scalars(
            select(Segment.id).join(Job, Job.id == Segment.job_id)
            .where(Job.model == model, Segment.status == "pending",
                   Segment.dispatched_at.is_not(None))
            .order_by(Segment.dispatched_at, Segment.id).limit(1)).one()
        connection.execute(update(Segment).where(Segment.id == oldest).values(status="done"))


def timed(call: Any, turns: int) -> list[float]:
    taken = []
    for _ in range(turns):
        started = time.perf_counter()
        call()
        taken.append((time.perf_counter() - started) * 1000)
    return taken


def measure(url: str, jobs: int, segments: int, keys: int, turns: int) -> list[Any]:
    """One row: the median and 95th percentile of each call, in ms."""
    import models.db
    from core.registry import worker_id
    from models import WorkerBeat, utcnow
    from models import segments as segment_state
    from models.db import session_scope, sql_engine_for
    from workers.jobs import dispatch, reaper

    engine = sql_engine_for(url)
    model = f"bench-{uuid.uuid4().hex[:8]}"
    fill(engine, model, jobs, segments, keys)
    if engine.dialect.name == "postgresql":  # as autovacuum does after a large insert
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("ANALYZE jobs, segments"))
    with engine.begin() as connection:  # this process dispatches: a live worker
        connection.execute(delete(WorkerBeat).where(WorkerBeat.id == worker_id()))
        connection.execute(insert(WorkerBeat).values(id=worker_id(), started_at=utcnow(),
                                                     heartbeat_at=utcnow() + HOUR))
    models.db.reset_sessionmaker()
    dispatch.dispatch(model, SLOTS, lambda _: None)

    def one_segment() -> None:
        finish_oldest(engine, model)
        dispatch.dispatch(model, SLOTS, lambda _: None)

    def metrics() -> None:
        with session_scope() as session:
            session.execute(segment_state.waiting_counts()).all()

    per_segment = timed(one_segment, turns)
    reap = timed(lambda: reaper.reap(900, lambda *_: None), max(3, turns // 20))
    counts = timed(metrics, max(3, turns // 20))
    engine.dispose()

    def cell(taken: list[float]) -> str:
        ranked = sorted(taken)
        return f"{statistics.median(ranked):.1f} / {ranked[int(len(ranked) * 0.95)]:.1f}"

    return [engine.dialect.name, jobs, jobs * segments, cell(per_segment), cell(reap),
            cell(counts)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="100,1000,10000")
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--database-url", default="",
                        help="a Postgres database to migrate and fill (its jobs stay)")
    args = parser.parse_args()
    from core import logs
    from migrations import upgrade

    logs.configure("WARNING")  # not a line per dispatch
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite:///{folder}/narrator.db"
        upgrade(url)
        os.environ["NARRATOR_DATABASE_URL"] = url
        rows = [measure(url, int(n), args.segments, args.keys, args.turns)
                for n in args.jobs.split(",")]
    print(f"ms, median / 95th percentile; {args.segments} segments a job, {args.keys} keys, "
          f"{SLOTS} in flight")
    print(table(["database", "jobs in progress", "segments", "finish + dispatch one",
                 "reaper pass", "/metrics waiting counts"], rows))
    save(f"dispatch_scale_{rows[0][0]}", {"segments_per_job": args.segments,
                                          "keys": args.keys, "slots": SLOTS, "rows": rows})


if __name__ == "__main__":
    main()
