"""The completeness guard: a job is never planned short and never completed short.

The pipeline runs in this process on a database of its own, with a scripted engine double
at the engine boundary (tests.test_quality.Scripted).
"""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from core.keys import part_key
from core.text import Gaps, IncompletePlan, Piece, check_plan, plan_pieces
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from tests.support import insert_job
from tests.test_quality import Scripted

BOOK = ["First chapter. It has [pause:1s] two paragraphs.\n\nThe second one is short.",
        "Second chapter, one sentence."]


def _plan(chapters: list[str]) -> list[Piece]:
    return list(plan_pieces(chapters, 40, Gaps()))


def test_a_whole_plan_passes_and_says_what_it_checked() -> None:
    pieces = _plan(BOOK)
    checked = check_plan(BOOK, pieces)
    assert checked == {"chapters": 2, "segments": len(pieces),
                       "characters": sum(ch.isalnum() for p in pieces for ch in p.text)}


@pytest.mark.parametrize("cut", ["drop", "truncate", "swap", "other_text", "wrong_chapter"])
def test_a_cut_plan_is_refused_with_the_chapter_and_place(cut: str) -> None:
    pieces = _plan(BOOK)
    first, second, *rest = pieces
    broken = {
        "drop": [first, *rest],
        "truncate": [first, Piece(second.chapter, second.text[:-5], 0.0), *rest],
        "swap": [second, first, *rest],
        "other_text": [first, Piece(second.chapter, "Something else entirely.", 0.0), *rest],
        "wrong_chapter": [*pieces[:-1], Piece(0, pieces[-1].text, 0.0)],
    }[cut]
    with pytest.raises(IncompletePlan, match=r"chapter \d: the planned segments hold \d+ of"):
        check_plan(BOOK, broken)


@pytest.fixture
def job(pipeline_env: None, db: Engine) -> uuid.UUID:
    """A queued job of BOOK, as the API stores it."""
    return uuid.UUID(str(insert_job(db, BOOK, "wav", {"subtitles": ["srt"]})))


def _job(db: Engine, job_id: uuid.UUID) -> tuple[str, dict[str, str] | None, object, int]:
    with db.connect() as connection:
        status, error, result = connection.execute(text(
            "SELECT status, error, result FROM jobs WHERE id = :id"), {"id": job_id}).one()
        segments = connection.execute(text(
            "SELECT count(*) FROM segments WHERE job_id = :id"), {"id": job_id}).scalar_one()
    return status, error, result, segments


def test_a_job_whose_plan_was_cut_fails_with_a_clear_error_and_no_segments(
        job: uuid.UUID, db: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.jobs import pipeline

    def cut(*args: object, **kwargs: object) -> Iterator[Piece]:  # the test hook
        pieces = list(plan_pieces(*args, **kwargs))  # type: ignore[arg-type]
        return iter(pieces[:1] + pieces[2:])

    monkeypatch.setattr(pipeline, "plan_pieces", cut)
    assert pipeline.plan(job) == ("piper", [])
    message, segments = _failed(db, job, "plan_incomplete")
    assert "chapter 1: the planned segments hold" in message
    assert segments == 0


def _failed(db: Engine, job_id: uuid.UUID, code: str) -> tuple[str, int]:
    """Check the job failed with `code` and no result; return its message and segments."""
    status, error, result, segments = _job(db, job_id)
    assert status == "failed"
    assert error is not None
    assert error["code"] == code
    assert result is None
    return error["message"], segments


def _synthesize_all(db: Engine, job_id: uuid.UUID) -> None:
    from workers.jobs import pipeline

    _, ids = pipeline.plan(job_id)
    assert len(ids) > 2
    for segment_id in ids:
        pipeline.synthesize(segment_id, engine=Scripted([1.0]))


def test_a_whole_job_completes_with_its_checks_in_the_manifest(
        job: uuid.UUID, db: Engine, tmp_path: Path) -> None:
    from storage import store_for
    from workers.jobs import pipeline

    _synthesize_all(db, job)
    assert pipeline.assemble(job).outcome == "completed"
    status, _, result, segments = _job(db, job)
    assert status == "completed"
    assert isinstance(result, dict)
    manifest = json.loads(store_for().get(result["manifest_key"]))
    assert manifest["checks"]["text"]["segments"] == segments
    assert manifest["checks"]["parts"]["segments"] == segments


def test_a_lost_part_is_synthesised_again_instead_of_completing_short(
        job: uuid.UUID, db: Engine) -> None:
    from storage import store_for
    from workers.jobs import pipeline

    _synthesize_all(db, job)
    store_for().delete(part_key(job, 1))
    assembled = pipeline.assemble(job)
    assert assembled.outcome == "waiting"
    assert len(assembled.again) == 1
    status, _, result, segments = _job(db, job)
    assert (status, result) == ("in_progress", None)
    with db.connect() as connection:
        done, index = connection.execute(text(
            "SELECT j.segments_done, s.index FROM jobs j JOIN segments s ON s.job_id = j.id"
            " WHERE s.id = :id AND s.status = 'pending'"), {"id": assembled.again[0]}).one()
    assert index == 1
    assert done == segments - 1
    last = pipeline.synthesize(assembled.again[0], engine=Scripted([1.0]))
    assert last is not None
    assert (last.job_id, last.last) == (job, True)
    assert pipeline.assemble(job).outcome == "completed"


def test_a_job_missing_a_planned_segment_fails_and_is_never_completed(
        job: uuid.UUID, db: Engine) -> None:
    from workers.jobs import pipeline

    _synthesize_all(db, job)
    with db.begin() as connection:
        connection.execute(text("DELETE FROM segments WHERE job_id = :id AND index = 1"),
                           {"id": job})
    assert pipeline.assemble(job).outcome == "failed"
    message, _ = _failed(db, job, "incomplete_result")
    assert "of the" in message
