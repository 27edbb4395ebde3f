"""What the segment_events trigger costs a worker: a segment's claim and finish, with the
trigger and without it, on Postgres (and SQLite), each in its own transaction as a worker
runs them.

A harness, not the product: it leaves out the engine, the part's write and Celery, which
take far longer per segment (bench.worker_overhead, bench.gpu_product); what it isolates is
the two statements a segment's normal path runs and the two event rows the trigger adds.

    python -m bench.segment_events [--segments 1000] [--turns 5]
                                   [--database-url postgresql://...]  # else SQLite only
"""

import argparse
import statistics
import tempfile
import time
import uuid
from typing import Any

from sqlalchemy import Engine, insert, text
from sqlalchemy.orm import Session

from bench.common import save, table


def _job(engine: Engine, segments: int) -> list[uuid.UUID]:
    """A job in progress with `segments` pending segments; return their ids."""
    from models import Job, Segment, utcnow, uuid7

    job_id, now, ids = uuid7(), utcnow(), [uuid7() for _ in range(segments)]
    with engine.begin() as connection:
        connection.execute(insert(Job).values(
            id=job_id, owner="", status="in_progress", model="piper", voice="joe",
            response_format="wav", speed=1.0, options={}, chapters=[], metadata={},
            input_characters=segments, segments_total=segments, segments_done=0,
            segments_failed=0, audio_seconds=0.0, created_at=now, updated_at=now,
            chars_done=0))
        connection.execute(insert(Segment), [
            {"id": key, "job_id": job_id, "index": n, "chapter": 0, "text": "Hello.",
             "pause_after": 0.0, "status": "pending", "attempts": 0}
            for n, key in enumerate(ids)])
    return ids


def _run(engine: Engine, ids: list[uuid.UUID]) -> float:
    """Claim and finish each segment (two transactions each); return the seconds."""
    from models import Segment
    from models import segments as segment_state

    started = time.perf_counter()
    for segment_id in ids:
        with Session(engine) as session, session.begin():
            session.execute(segment_state.claimed(segment_id, "bench", Segment.id)).first()
        with Session(engine) as session, session.begin():
            session.execute(segment_state.finished(segment_id, "bench", 10, 0.1, None,
                                                   0)).first()
    return time.perf_counter() - started


class Trigger:
    """Turn the segment_events trigger off and on again (Postgres: ALTER TABLE ... DISABLE;
    SQLite has no such switch: the trigger is dropped and made again from its own SQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.on = engine, True  # as the migration leaves it
        self.postgres = engine.dialect.name == "postgresql"
        with engine.connect() as connection:
            self.sql = "" if self.postgres else connection.scalar(text(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                "AND name = 'segment_events'"))

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        self.on = on
        with self.engine.begin() as connection:
            if self.postgres:
                connection.execute(text("ALTER TABLE segments "
                                        f"{'ENABLE' if on else 'DISABLE'} TRIGGER segment_events"))
            elif on:
                connection.execute(text(self.sql))
            else:
                connection.execute(text("DROP TRIGGER segment_events"))


def measure(url: str, segments: int, turns: int) -> list[list[Any]]:
    """Rows of the table for one database: a warm-up, then the trigger on and off in turns
    (so that the machine's drift weighs on both), the median of each."""
    from migrations import upgrade
    from models.db import sql_engine_for

    upgrade(url)
    engine = sql_engine_for(url)
    trigger = Trigger(engine)
    _run(engine, _job(engine, segments // 4))  # connections, plans, the trigger's function
    taken: dict[bool, list[float]] = {True: [], False: []}
    for on in [True, False] * turns:
        trigger.set(on)
        taken[on].append(_run(engine, _job(engine, segments)) * 1e6 / segments)
    trigger.set(True)
    engine.dispose()
    with_it, without = statistics.median(taken[True]), statistics.median(taken[False])
    return [[engine.dialect.name, segments, turns, f"{with_it:.0f}", f"{without:.0f}",
             f"{with_it - without:.0f}", f"{with_it / without:.3f}",
             " ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(taken[True], taken[False], strict=True))]]


def main() -> None:
    """Measure on Postgres (when given) and on a fresh SQLite file; print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--database-url", default="",
                        help="a Postgres database to migrate and use (it gets one job)")
    args = parser.parse_args()
    rows = []
    if args.database_url:
        rows += measure(args.database_url, args.segments, args.turns)
    with tempfile.TemporaryDirectory() as folder:
        rows += measure(f"sqlite:///{folder}/narrator.db", args.segments, args.turns)
    print("µs per segment for its claim and finish (two transactions), median of the turns")
    print(table(["database", "segments", "turns", "trigger on", "off", "added", "on / off",
                 "each turn (on/off)"], rows))
    save("segment_events", {"rows": rows})


if __name__ == "__main__":
    main()
