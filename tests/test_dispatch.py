"""Dispatch (workers/jobs/dispatch.py): which waiting segments go on the broker, in what
order, on SQLite and on Postgres, with several dispatchers at once."""

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select, update

import workers.settings
from core.catalog import ModelInfo
from core.registry import WorkerRecord
from models import Job, Segment, WorkerBeat
from models.base import utcnow, uuid7
from models.db import sql_engine_for
from workers.jobs import dispatch, reaper


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The database dispatch runs on, as the workers' settings name it."""
    from migrations import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/narrator.db"
        upgrade(url)
    else:
        url = request.getfixturevalue("database_url")
    monkeypatch.setenv("NARRATOR_DATABASE_URL", url)
    import models.settings

    models.settings.get_settings.cache_clear()
    workers.settings.get_settings.cache_clear()
    models.db.reset_sessionmaker()
    engine = sql_engine_for(url)
    yield engine
    engine.dispose()
    models.db.reset_sessionmaker()
    models.settings.get_settings.cache_clear()
    workers.settings.get_settings.cache_clear()


def _job(engine: Engine, model: str, owner: str, segments: int,
         priority: str = "normal", weight: int = 1) -> uuid.UUID:
    """A job in progress with `segments` segments waiting for dispatch."""
    job_id, now = uuid7(), utcnow()
    with engine.begin() as connection:
        connection.execute(insert(Job.metadata.tables["jobs"]).values(
            id=job_id, owner=owner, status="in_progress", model=model, voice="joe",
            response_format="wav", speed=1.0, options={}, chapters=[], metadata={},
            priority=priority, weight=weight, input_characters=5 * segments,
            segments_total=segments, segments_done=0, segments_failed=0, audio_seconds=0.0,
            created_at=now, updated_at=now, chars_done=0))
        connection.execute(insert(Segment.metadata.tables["segments"]), [
            {"id": uuid7(), "job_id": job_id, "index": n, "chapter": 0, "text": "Hello.",
             "pause_after": 0.0, "status": "pending", "attempts": 0}
            for n in range(segments)])
    return job_id


def _owners(engine: Engine, sent: list[uuid.UUID]) -> list[uuid.UUID]:
    with engine.connect() as connection:
        jobs = dict(connection.execute(select(Segment.id, Segment.job_id)
                                       .where(Segment.id.in_(sent))).all())
    return [jobs[s] for s in sent]


def _run(engine: Engine, model: str, slots: int, rounds: int,
         sent: list[uuid.UUID] | None = None) -> list[uuid.UUID]:
    """Keep `slots` segments dispatched; each round the oldest dispatched one is done and
    dispatch refills, as a worker's finished segment does. Return the jobs in the order
    their segments were sent (appended to `sent` too, when given)."""
    sent = [] if sent is None else sent
    start = len(sent)
    dispatch.dispatch(model, slots, sent.append)
    for _ in range(rounds):
        _finish_oldest(engine, sent)
        dispatch.dispatch(model, slots, sent.append)
    return _owners(engine, sent[start:])


def _finish_oldest(engine: Engine, sent: list[uuid.UUID]) -> None:
    """The first segment in `sent` (the order they were sent) not yet done is done: its slot
    frees. (Send order, not `dispatched_at`: a wall clock may step back between sends.)"""
    with engine.begin() as connection:
        done = set(connection.scalars(select(Segment.id).where(
            Segment.id.in_(sent), Segment.status == "done")).all())
        oldest = next(s for s in sent if s not in done)
        connection.execute(update(Segment).where(Segment.id == oldest).values(status="done"))


def test_a_small_job_of_another_key_goes_out_before_the_rest_of_a_book(
        database: Engine) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    book = _job(database, model, "alice", 40)
    sent: list[uuid.UUID] = []
    order = _run(database, model, 2, 2, sent)  # the book alone fills the queue
    assert order == [book] * 4
    small = _job(database, model, "bob", 3)
    order = _run(database, model, 0, 0, sent)  # nothing more sent without a free slot
    assert order == []
    before = len(sent)
    for _ in range(6):  # six more slots free, one at a time
        _finish_oldest(database, sent)
        dispatch.dispatch(model, 2, sent.append)
    jobs = _owners(database, sent[before:])
    # Bob's three segments go out in the first free slots, taking turns with Alice's book
    # (one slot each), not after its 36 waiting segments.
    assert [n for n, job in enumerate(jobs) if job == small] == [0, 2, 4]
    assert jobs[1] == jobs[3] == jobs[5] == book


def test_a_key_busy_on_another_model_keeps_its_share_of_this_one(database: Engine) -> None:
    gpu, cpu = f"m-{uuid.uuid4().hex[:8]}", f"m-{uuid.uuid4().hex[:8]}"
    _job(database, gpu, "alice", 10)
    dispatch.dispatch(gpu, 10, lambda _: None)  # alice fills the other model's engine
    mine = _job(database, cpu, "alice", 4)
    theirs = _job(database, cpu, "bob", 4)
    sent: list[uuid.UUID] = []
    dispatch.dispatch(cpu, 4, sent.append)
    # On this model's engine alice and bob start even: each key's share is counted per model.
    assert _owners(database, sent) == [mine, theirs, mine, theirs]


def test_a_keys_jobs_take_turns_and_priorities_come_first(database: Engine) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    first = _job(database, model, "alice", 4)
    second = _job(database, model, "alice", 4)
    bulk = _job(database, model, "carol", 4, priority="low")
    urgent = _job(database, model, "dave", 2, priority="high")
    sent: list[uuid.UUID] = []
    dispatch.dispatch(model, 14, sent.append)
    order = _owners(database, sent)
    assert order[:2] == [urgent, urgent]  # high before everything waiting
    assert order[-4:] == [bulk] * 4  # low after every normal job
    assert order[2:10].count(first) == order[2:10].count(second) == 4
    assert order[2:6] == [first, second, first, second]  # one key's jobs take turns


def test_keys_share_the_slots_by_weight(database: Engine) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    heavy = _job(database, model, "editors", 40, weight=3)
    light = _job(database, model, "crawler", 40)
    sent: list[uuid.UUID] = []
    dispatch.dispatch(model, 8, sent.append)
    order = _owners(database, sent)
    assert order.count(heavy) == 6  # three slots for one
    assert order.count(light) == 2
    for _ in range(24):  # as segments finish, one at a time, the share holds
        _finish_oldest(database, sent)
        dispatch.dispatch(model, 8, sent.append)
    with database.connect() as connection:
        in_flight = connection.scalars(select(Segment.job_id).where(
            Segment.job_id.in_([heavy, light]), Segment.status == "pending",
            Segment.dispatched_at.is_not(None))).all()
    assert in_flight.count(heavy) == 6, in_flight


def test_dispatchers_at_once_send_each_segment_once(database: Engine) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    jobs = [_job(database, model, f"key-{n % 3}", 15) for n in range(6)]
    sent: list[uuid.UUID] = []
    lock = threading.Lock()

    def send(segment: uuid.UUID) -> None:
        with lock:
            sent.append(segment)

    def dispatcher() -> None:
        for _ in range(30):
            dispatch.dispatch(model, 90, send)

    threads = [threading.Thread(target=dispatcher) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == len(set(sent)) == 90  # every segment once, none twice
    assert set(_owners(database, sent)) == set(jobs)


def test_the_queue_holds_what_the_models_workers_can_start() -> None:
    piper = ModelInfo("piper", "piper", 22050, ("en",), ())
    other = ModelInfo("other", "piper", 22050, ("en",), ())

    def record(name: str, state: str, slots: int, *served: ModelInfo) -> WorkerRecord:
        return WorkerRecord(name, state, (), served, 0.0, slots=slots)

    live = [record("a", "ready", 64, piper), record("b", "warming", 2, piper),
            record("c", "failed", 64, piper), record("d", "ready", 8, other),
            record("e", "ready", 8)]  # an assembly worker serves no model
    assert dispatch.target("piper", live) == 66
    assert dispatch.target("nobody", live) == dispatch.FLOOR


def test_the_reaper_leaves_waiting_segments_to_dispatch(database: Engine) -> None:
    """Segments not yet dispatched are not forgotten ones: re-enqueuing them would undo the
    fair order; dispatched ones whose message may be lost are sent again."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    job = _job(database, model, "alice", 5)
    sent: list[uuid.UUID] = []
    dispatch.dispatch(model, 2, sent.append)
    long_ago = utcnow() - timedelta(hours=1)
    with database.begin() as connection:
        connection.execute(update(Job).where(Job.id == job).values(updated_at=long_ago))
    again: list[tuple[str, str, str, float]] = []
    reaper.reap(60, lambda *task: again.append(task))
    assert {uuid.UUID(item) for _, item, of, _ in again if of == model} == set(sent)


def _beats(database: Engine) -> dict[str, str]:
    """Two workers' registry rows: one beating now, one silent for five minutes."""
    workers = {"alive": f"alive-{uuid.uuid4().hex[:8]}:1", "dead": f"dead-{uuid.uuid4().hex[:8]}:1"}
    now = utcnow()
    with database.begin() as connection:
        for who, worker in workers.items():
            at = now if who == "alive" else now - timedelta(minutes=5)
            connection.execute(insert(WorkerBeat).values(id=worker, started_at=at,
                                                         heartbeat_at=at))
    return workers


def test_a_dispatcher_that_dies_before_sending_loses_nothing(
        database: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatch commits, then sends: a dispatcher killed in between leaves segments marked
    dispatched with no message. They carry its worker id, so the reaper's dead-worker sweep
    sends them once its heartbeat is stale (WORKER_DEAD_SECONDS), well before the
    forgotten-work sweep (SEGMENT_STALE_SECONDS, 900 s by default) would. A job the dead
    worker never touched keeps its messages as they are."""
    model, other = f"m-{uuid.uuid4().hex[:8]}", f"m-{uuid.uuid4().hex[:8]}"
    _job(database, model, "alice", 6)
    _job(database, other, "bob", 6)
    dispatchers = _beats(database)
    never_sent: dict[str, list[uuid.UUID]] = {"alive": [], "dead": [], "other": []}
    for who in ("alive", "dead"):
        monkeypatch.setattr(dispatch, "worker_id", lambda worker=dispatchers[who]: worker)
        dispatch.dispatch(model, 2 if who == "alive" else 4, never_sent[who].append)
    monkeypatch.setattr(dispatch, "worker_id", lambda: dispatchers["alive"])
    dispatch.dispatch(other, 2, never_sent["other"].append)
    again: list[tuple[str, str, str, float]] = []
    reaper.reap(900, lambda *task: again.append(task))  # the default SEGMENT_STALE_SECONDS
    resent = {uuid.UUID(item) for _, item, _, _ in again}
    assert len(never_sent["dead"]) == 2
    assert set(never_sent["dead"]) <= resent
    # What the live dispatcher sent of the dead one's job goes again too (the dead worker
    # may have taken it: see the next test); of a job it never touched, nothing.
    assert set(never_sent["alive"]) <= resent
    assert not resent & set(never_sent["other"])


def test_a_message_a_worker_took_before_it_died_is_sent_again(
        database: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker can die between taking a segment's message off the broker and saying so
    (pipeline.reserve): the segment still carries its live dispatcher's id, and the embedded
    broker never hands such a message back. Every dispatched segment of a running job the
    dead worker worked on is sent again at once; a duplicate claims nothing."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    job = _job(database, model, "alice", 6)
    workers = _beats(database)
    monkeypatch.setattr(dispatch, "worker_id", lambda: workers["alive"])
    sent: list[uuid.UUID] = []
    dispatch.dispatch(model, 3, sent.append)
    with database.begin() as connection:  # the dead worker was running the first one
        connection.execute(update(Segment).where(Segment.id == sent[0]).values(
            status="running", worker=workers["dead"],
            heartbeat_at=utcnow() - timedelta(minutes=5)))
    again: list[tuple[str, str, str, float]] = []
    reaper.reap(900, lambda *task: again.append(task))
    resent = [uuid.UUID(item) for _, item, of, _ in again if of == model]
    assert sorted(resent) == sorted(sent)  # the lost one and the two it may have taken
    assert set(_owners(database, resent)) == {job}


def test_a_jobs_queue_counts_its_waiting_and_in_flight_segments(database: Engine) -> None:
    from models import segments as segment_state

    model = f"m-{uuid.uuid4().hex[:8]}"
    job = _job(database, model, "alice", 5)
    dispatch.dispatch(model, 2, lambda _: None)
    with database.begin() as connection:
        connection.execute(update(Segment).where(  # one of the two is running now
            Segment.job_id == job, Segment.index == 0).values(status="running"))
        counts = connection.execute(select(*segment_state.queue_of_job())
                                    .where(Job.id == job)).one()
    assert tuple(counts) == (3, 2)


def test_threads_that_ask_at_once_dispatch_in_order_and_to_the_target(database: Engine) -> None:
    """A wave of segments ends together and each of its threads asks for dispatch: the
    passes run in turn, so a book's segments reach the broker in order, and no more of them
    than the queue's target."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    job = _job(database, model, "key", 200)
    sent: list[uuid.UUID] = []
    start = threading.Barrier(32)

    def send(segment: uuid.UUID) -> None:
        time.sleep(0.001)  # a broker round trip: other passes would interleave here
        sent.append(segment)

    def asker() -> None:
        start.wait()
        dispatch.dispatch_in_turn(model, lambda: 64, send)

    threads = [threading.Thread(target=asker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with database.connect() as connection:
        index = dict(connection.execute(select(Segment.id, Segment.index)
                                        .where(Segment.job_id == job)).all())
    assert [index[s] for s in sent] == list(range(64))
