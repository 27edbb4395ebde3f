"""The quality guard: runaway and truncated segments are synthesised again and flagged."""

import uuid
from collections.abc import Iterator

import numpy as np
from sqlalchemy import Engine, text

from core.catalog import catalog
from core.settings import CoreSettings
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from workers.engines import Audio, SpeechRequest
from workers.jobs import quality


def test_check_finds_runaway_and_truncated_lengths() -> None:
    assert quality.check(100, 6.0, 0.06) is None
    runaway = quality.check(100, 60.0, 0.06)
    assert runaway is not None
    assert runaway.reason == "runaway"
    truncated = quality.check(100, 0.5, 0.06)
    assert truncated is not None
    assert truncated.reason == "truncated"
    assert quality.check(10, 0.1, 0.06) is None  # too short to judge truncation


def test_rate_is_measured_once_the_job_has_enough_text() -> None:
    assert quality.seconds_per_char("piper", 0.0, 0, 1.0) == 0.06
    assert quality.seconds_per_char("piper", 0.0, 0, 2.0) == 0.03
    assert quality.seconds_per_char("piper", 50.0, 1000, 1.0) == 0.05


class Scripted:
    """A test double at the engine boundary: returns audio of scripted lengths."""

    def __init__(self, lengths: list[float]) -> None:
        self.info = catalog(CoreSettings())[0]
        self.lengths = lengths
        self.seeds: list[int | None] = []

    @property
    def sample_rate(self) -> int:
        return 22050

    def start(self) -> None:
        """Nothing to start."""

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        self.seeds.append(requests[0].seed)
        seconds = self.lengths[min(len(self.seeds) - 1, len(self.lengths) - 1)]
        t = np.arange(int(seconds * 22050)) / 22050
        return [(0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)]

    def stream(self, request: SpeechRequest) -> Iterator[Audio]:
        yield from self.synthesize([request])


def _segment(db: Engine, chars: int) -> uuid.UUID:
    job_id, segment_id = uuid.uuid4(), uuid.uuid4()
    with db.begin() as connection:
        connection.execute(text(
            "INSERT INTO jobs (id, owner, status, model, voice, response_format, speed, options,"
            " chapters, metadata, input_characters, segments_total, segments_done,"
            " segments_failed, audio_seconds, created_at, updated_at, chars_done) VALUES"
            " (:id, '', 'in_progress', 'piper', 'joe', 'wav', 1.0, '{}', '[]', '{}', :chars,"
            " 2, 0, 0, 0, now(), now(), 0)"), {"id": job_id, "chars": chars})
        connection.execute(text(
            "INSERT INTO segments (id, job_id, index, chapter, text, pause_after, status,"
            " attempts) VALUES (:id, :job, 0, 0, :text, 0, 'pending', 0)"),
            {"id": segment_id, "job": job_id, "text": "x" * chars})
    return segment_id


def _row(db: Engine, segment_id: uuid.UUID) -> tuple[int, dict[str, object], float]:
    with db.connect() as connection:
        attempts, flag, seconds = connection.execute(text(
            "SELECT attempts, quality, duration_seconds FROM segments WHERE id = :id"),
            {"id": segment_id}).one()
    return attempts, flag, seconds


def test_a_runaway_segment_is_synthesised_again_with_a_new_seed(
        pipeline_env: None, db: Engine) -> None:
    from workers.jobs import pipeline

    segment_id = _segment(db, 100)  # expected about 6 s
    engine = Scripted([60.0, 6.2])
    pipeline.synthesize(segment_id, engine=engine)
    attempts, flag, seconds = _row(db, segment_id)
    assert engine.seeds == [None, 1]
    assert attempts == 2
    assert flag == {"retries": 1, "passed": True}
    assert abs(seconds - 6.2) < 0.01


def test_a_segment_that_never_passes_keeps_the_closest_take_and_is_flagged(
        pipeline_env: None, db: Engine) -> None:
    from workers.jobs import pipeline

    segment_id = _segment(db, 100)
    pipeline.synthesize(segment_id, engine=Scripted([60.0, 0.2, 40.0]))
    attempts, flag, seconds = _row(db, segment_id)
    assert attempts == 3
    assert flag["passed"] is False
    assert flag["reason"] == "runaway"
    assert abs(seconds - 40.0) < 0.01  # by ratio, 40 s is the closest to the expected 6 s
