"""Jobs that once failed or left things behind, run through a real API and Piper worker on
Postgres and Redis: a book whose paragraphs have nothing to say, and a job deleted while it
runs."""

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import base_env, error_of, fresh_database, redis_url
from tests.support import Stack, start_stack, wait_for, wait_job

# Every punctuation-only paragraph a novel uses between scenes and in dialogue.
BREAKS = ["...", "\u2026", "\u2014", "\u2013", "* * *", "***", "\u00a7", "#", "~", "\u201c",
          "\u201d", "'", '"', "\u2014\u2014\u2014", ". . .", "-", "(\u2026)"]


def test_a_book_with_paragraphs_that_have_nothing_to_say_completes(local_stack: Stack) -> None:
    book = "\n\n".join(["It was late."] + [f"{mark}\n\nLine {n}." for n, mark
                                            in enumerate(BREAKS)])
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", json={"input": book, "response_format": "wav",
                                                    "subtitles": ["srt"]})
        assert created.status_code == 202, created.text
        job = wait_job(http, created.json()["id"], timeout=240)
        assert job["status"] == "completed", job
        assert job["segments"]["total"] == 1 + len(BREAKS)  # the marks are silence
        manifest = http.get(job["result"]["manifest_url"]).json()
        gaps = [s["start_seconds"] for s in manifest["segments"]]
        assert gaps == sorted(gaps)


def test_a_job_deleted_while_it_runs_leaves_no_file_a_minute_later(local_stack: Stack) -> None:
    assert local_stack.media is not None
    book = "\n\n".join(f"Paragraph {n} of a book that is deleted while it is read."
                       for n in range(60))
    with local_stack.client() as http:
        job_id = http.post("/v1/audio/jobs", json={"input": book, "response_format": "mp3",
                                                   "subtitles": ["srt"]}).json()["id"]
        wait_for(lambda: http.get(f"/v1/audio/jobs/{job_id}").json()["segments"]["done"] >= 2,
                 120, "the job to be under way")
        assert http.delete(f"/v1/audio/jobs/{job_id}").status_code == 200
        deleted = time.monotonic()
    folder = local_stack.media / "jobs" / str(uuid.UUID(hex=job_id.removeprefix("job_")))
    while time.monotonic() - deleted < 60:  # segments in flight finish and write meanwhile
        time.sleep(2)
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []
    assert left == [], left


KEY = "nk_test_rerender_caps"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API and Piper worker on Postgres and Redis with per-key caps: one active job, 1,000
    characters a day, 600 characters a job."""
    redis.Redis.from_url(redis_url(13)).flushdb()
    tmp = tmp_path_factory.mktemp("rerender-caps")
    with fresh_database() as url:
        stack = start_stack(tmp, base_env(tmp, url, 13) | {
            "NARRATOR_API_KEYS": KEY, "NARRATOR_MAX_ACTIVE_JOBS_PER_KEY": "1",
            "NARRATOR_MAX_CHARS_PER_DAY_PER_KEY": "1000", "NARRATOR_JOB_MAX_CHARS": "600"})
        yield stack
        stack.stop()


def test_a_rerender_is_charged_and_capped_like_a_job(capped: Stack) -> None:
    chapters = [{"input": "The boats came in at dawn."}, {"input": "Fish were sold by noon."},
                {"input": "The square emptied slowly."}]  # 75 characters
    with capped.client(headers={"Authorization": f"Bearer {KEY}"}) as http:
        first = wait_job(http, http.post("/v1/audio/jobs", json={"chapters": chapters})
                         .json()["id"], timeout=120)
        assert first["status"] == "completed", first
        path = f"/v1/audio/jobs/{first['id']}/rerender"
        too_long = http.post(path, json={"inputs": {"0": "Long. " * 100}})  # 599 + 49
        assert too_long.status_code == 400, too_long.text
        assert error_of(too_long)["code"] == "input_too_long"
        running = http.post("/v1/audio/jobs", json={
            "input": "\n\n".join(f"Paragraph {n} keeps this key busy." for n in range(12))})
        assert running.status_code == 202  # 75 + 408 characters charged
        busy = http.post(path, json={"chapters": [1]})
        assert busy.status_code == 429, busy.text
        assert error_of(busy)["code"] == "too_many_active_jobs"
        assert wait_job(http, running.json()["id"], timeout=180)["status"] == "completed"
        again = http.post(path, json={"inputs": {"0": "A new first chapter, read again. " * 15}})
        assert again.status_code == 202, again.text  # 494 characters: 977 in all
        assert wait_job(http, first["id"], timeout=180)["status"] == "completed"
        over = http.post(path, json={"chapters": [2]})  # 26 more: past 1,000
        assert over.status_code == 429, over.text
        assert error_of(over)["code"] == "daily_quota_exceeded"
