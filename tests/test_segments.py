"""The segment state machine (models/segments.py): the one place segment rows change, and
its conditions hold when workers race, on SQLite and on Postgres."""

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from models import Job, Segment, SegmentEvent
from models import segments as segment_state
from models.base import utcnow, uuid7
from models.db import sql_engine_for

ROOT = Path(__file__).resolve().parent.parent
WRITES = re.compile(r"\b(update|delete)\(\s*Segment\b|Segment\.__table__\.(update|delete)")


def test_nothing_outside_the_state_machine_updates_or_deletes_segments() -> None:
    """A reader finds every way a segment changes in models/segments.py, and only there."""
    offenders = [str(path.relative_to(ROOT))
                 for package in ("api", "core", "models", "storage", "workers", "narrator")
                 for path in (ROOT / package).rglob("*.py")
                 if path != ROOT / "models" / "segments.py" and WRITES.search(path.read_text())]
    assert offenders == []


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    from migrations import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/narrator.db"
        upgrade(url)
    else:
        url = request.getfixturevalue("database_url")
    engine = sql_engine_for(url)
    yield engine
    engine.dispose()


def _pending_segment(engine: Engine) -> uuid.UUID:
    """A job in progress with one pending segment; return the segment's id."""
    job_id, segment_id, now = uuid7(), uuid7(), utcnow()
    with engine.begin() as connection:
        connection.execute(insert(Job.metadata.tables["jobs"]).values(
            id=job_id, owner="", status="in_progress", model="piper", voice="joe",
            response_format="wav", speed=1.0, options={}, chapters=[], metadata={},
            input_characters=5, segments_total=1, segments_done=0, segments_failed=0,
            audio_seconds=0.0, created_at=now, updated_at=now, chars_done=0))
        connection.execute(insert(Segment.metadata.tables["segments"]).values(
            id=segment_id, job_id=job_id, index=0, chapter=0, text="Hello.", pause_after=0.0,
            status="pending", attempts=0))
    return segment_id


def _run(engine: Engine, statement: object) -> list[tuple[object, ...]]:
    with Session(engine) as session, session.begin():
        return [tuple(row) for row in session.execute(statement)]  # type: ignore[call-overload]


def test_a_segment_is_claimed_by_one_worker_of_many_racing_and_finished_only_by_it(
        database: Engine) -> None:
    segment_id = _pending_segment(database)
    start, won = threading.Barrier(8), []
    errors: list[BaseException] = []

    def claim(worker: str) -> None:
        start.wait()
        try:
            if _run(database, segment_state.claimed(segment_id, worker, Segment.id)):
                won.append(worker)
        except Exception as error:  # SQLite's writer lock: a loser may also be refused
            if "locked" not in str(error):
                errors.append(error)

    threads = [threading.Thread(target=claim, args=(f"w{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(won) == 1
    other = "w9" if won[0] != "w9" else "w8"
    assert _run(database, segment_state.finished(segment_id, other, 10, 0.1, None, 0)) == []
    assert _run(database, segment_state.finished(segment_id, won[0], 10, 0.1, None, 0)) == [
        (segment_id,)]
    with Session(database) as session:
        row = session.execute(select(Segment.status, Segment.attempts, Segment.worker)
                              .where(Segment.id == segment_id)).one()
    assert (row.status.value, row.attempts, row.worker) == ("done", 1, won[0])
    # done: no claim, no second finish
    assert _run(database, segment_state.claimed(segment_id, "w1", Segment.id)) == []
    assert _run(database, segment_state.finished(segment_id, won[0], 10, 0.1, None, 0)) == []
    # One claim and one finish happened, so the history holds those two changes only.
    assert [(e[0], e[1], e[3]) for e in _events(database, segment_id)] == [
        ("pending", "running", won[0]), ("running", "done", won[0])]


def _do(engine: Engine, statement: object) -> None:
    with Session(engine) as session, session.begin():
        session.execute(statement)  # type: ignore[call-overload]


def _events(engine: Engine, segment_id: uuid.UUID) -> list[tuple[object, ...]]:
    """The segment's history: (from, to, attempts, worker, error), oldest first."""
    with Session(engine) as session:
        return [tuple(row) for row in session.execute(
            select(SegmentEvent.from_status, SegmentEvent.to_status, SegmentEvent.attempts,
                   SegmentEvent.worker, SegmentEvent.error)
            .where(SegmentEvent.segment_id == segment_id).order_by(SegmentEvent.id))]


def test_every_status_change_of_a_segment_is_an_event_and_nothing_else_is(
        database: Engine) -> None:
    """Written by the database (a trigger), whichever statement changed the status."""
    segment_id = _pending_segment(database)
    _do(database, segment_state.reserved(segment_id, "w1"))  # no status change: no event
    _do(database, segment_state.claimed(segment_id, "w1", Segment.id))
    _do(database, segment_state.beaten([segment_id], "w1", utcnow()))  # a heartbeat: none
    _do(database, segment_state.released(segment_id, "w1", True, "engine error"))
    _do(database, segment_state.claimed(segment_id, "w2", Segment.id))
    _do(database, segment_state.finished(segment_id, "w2", 10, 0.1, None, 0))
    _do(database, segment_state.retaken(segment_id, 2, {"takes": []}))
    assert _events(database, segment_id) == [
        ("pending", "running", 1, "w1", None),
        ("running", "pending", 1, "w1", "engine error"),
        ("pending", "running", 2, "w2", "engine error"),
        ("running", "done", 2, "w2", None),
        ("done", "pending", 2, None, None),
    ]
    with Session(database) as session:
        at = session.scalars(select(SegmentEvent.at).where(
            SegmentEvent.segment_id == segment_id).order_by(SegmentEvent.id)).all()
    assert at == sorted(at)
    assert at[0].tzinfo is not None


def test_a_stopping_worker_hands_back_what_it_holds_and_gets_the_attempt_back(
        database: Engine) -> None:
    segment_id = _pending_segment(database)
    worker = f"w-{uuid.uuid4().hex[:6]}"
    assert _run(database, segment_state.claimed(segment_id, worker, Segment.attempts)) == [(1,)]
    back = _run(database, segment_state.handed_back(worker))
    assert [row[0] for row in back] == [segment_id]
    with Session(database) as session:
        row = session.execute(select(Segment.status, Segment.attempts, Segment.worker)
                              .where(Segment.id == segment_id)).one()
    assert (row.status.value, row.attempts, row.worker) == ("pending", 0, None)
    with Session(database) as session, session.begin():  # its own run ending late: no change
        session.execute(segment_state.released(segment_id, worker, False, "late"))
    with Session(database) as session:
        assert session.scalar(select(Segment.error).where(Segment.id == segment_id)) is None
