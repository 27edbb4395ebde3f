"""The reaper's retry budget: a lost segment comes back after a growing delay, then fails."""

import uuid

from sqlalchemy import Engine, text

from core.backoff import CAP_SECONDS, backoff
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401

Sent = list[tuple[str, str, str, float]]


def _lost_segment(db: Engine, attempts: int) -> tuple[uuid.UUID, uuid.UUID]:
    """A running job with one segment whose worker stopped beating an hour ago."""
    job_id, segment_id = uuid.uuid4(), uuid.uuid4()
    with db.begin() as connection:
        connection.execute(text(
            "INSERT INTO jobs (id, owner, status, model, voice, response_format, speed, options,"
            " chapters, metadata, input_characters, segments_total, segments_done,"
            " segments_failed, audio_seconds, created_at, updated_at, chars_done) VALUES"
            " (:id, '', 'in_progress', 'piper', 'joe', 'wav', 1.0, '{}', '[]', '{}', 5,"
            " 1, 0, 0, 0, now(), now(), 0)"), {"id": job_id})
        connection.execute(text(
            "INSERT INTO segments (id, job_id, index, chapter, text, pause_after, status,"
            " attempts, heartbeat_at) VALUES (:id, :job, 0, 0, 'Lost.', 0, 'running',"
            " :attempts, now() - interval '1 hour')"),
            {"id": segment_id, "job": job_id, "attempts": attempts})
    return job_id, segment_id


def _status(db: Engine, table: str, row_id: uuid.UUID) -> str:
    with db.connect() as connection:
        return str(connection.execute(text(f"SELECT status FROM {table} WHERE id = :id"),
                                      {"id": row_id}).scalar_one())


def test_a_lost_segment_is_requeued_with_a_doubling_delay(pipeline_env: None,
                                                          db: Engine) -> None:
    from workers.jobs import reaper

    sent: Sent = []
    first = _lost_segment(db, attempts=1)[1]
    second = _lost_segment(db, attempts=2)[1]
    counts = reaper.reap(60, lambda *task: sent.append(task), max_attempts=3,
                         backoff_seconds=5.0)
    assert counts["segments_reset"] >= 2  # other tests may have left lost segments too
    delays = {segment: delay for name, segment, _, delay in sent
              if name == "narrator.synthesize"}
    assert delays[str(first)] == 0.0  # the first loss goes again at once
    assert delays[str(second)] == 5.0  # repeated ones back off
    assert _status(db, "segments", first) == "pending"
    assert backoff(20, 5.0) == CAP_SECONDS


def test_a_segment_past_its_budget_fails_its_job_and_tells_the_owner(pipeline_env: None,
                                                                     db: Engine) -> None:
    from workers.jobs import reaper

    sent: Sent = []
    job_id, segment_id = _lost_segment(db, attempts=3)
    counts = reaper.reap(60, lambda *task: sent.append(task), max_attempts=3)
    assert counts["jobs_failed"] >= 1
    assert _status(db, "segments", segment_id) == "failed"
    assert _status(db, "jobs", job_id) == "failed"
    assert ("narrator.notify", str(job_id), "", 0.0) in sent
    assert not any(name == "narrator.synthesize" and item == str(segment_id)
                   for name, item, _, _ in sent)
    with db.connect() as connection:
        error = connection.execute(text("SELECT error FROM jobs WHERE id = :id"),
                                   {"id": job_id}).scalar_one()
    assert error["code"] == "segment_failed"
