"""Retrying a failed job: only what did not finish runs again, finished parts are kept.

Real `narrator api` and `narrator worker` processes with Piper on Postgres and Redis, media on
an S3 server over HTTP (`weed mini`) that goes down mid-job. Segment retries, backoff and the
reaper keep their defaults; only the assembly test shortens ASSEMBLY_MAX_ATTEMPTS (6 by
default, about 5 minutes of backoff) to fail within a test's time.
"""

import collections
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import S3_BUCKET, S3Server, base_env, fresh_database, redis_url
from tests.support import Stack, start_stack, wait_job, wait_segments

PARAGRAPH = ("The tide came in over the flats before anyone had noticed, and the birds rose "
             "together from the water in one long grey sheet. ") * 3
BOOK = {"input": "\n\n".join([PARAGRAPH] * 12), "response_format": "wav"}


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:  # a reaper of its own: it sees only this test's jobs
        yield url


def _stack(tmp_path: Path, database_url: str, s3: S3Server, **extra: str) -> Stack:
    redis.Redis.from_url(redis_url(1)).flushdb()
    return start_stack(tmp_path / "stack", base_env(tmp_path, database_url, 1)
                       | s3.stack_env() | extra)


def _runs(stack: Stack, job_id: str) -> collections.Counter[int]:
    """How many times each segment of a job was synthesised to the end (the worker's log)."""
    key = str(uuid.UUID(hex=job_id.removeprefix("job_")))
    runs: collections.Counter[int] = collections.Counter()
    for line in stack.worker.output().splitlines():
        if line.startswith("{") and '"segment.done"' in line and key in line:
            runs[json.loads(line)["segment"]] += 1
    return runs


def test_retry_after_storage_came_back_runs_only_the_failed_segments(
        tmp_path: Path, database_url: str, s3_server: S3Server) -> None:
    stack = _stack(tmp_path, database_url, s3_server)
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 3, what="progress before the outage")
            s3_server.stop()
            failed = wait_job(http, job["id"], timeout=180)
            assert failed["status"] == "failed", failed
            assert failed["error"]["code"] == "segment_failed"
            kept = failed["segments"]["done"]
            assert 3 <= kept < 12
            s3_server.start()
            retried = http.post(f"/v1/audio/jobs/{job['id']}/retry")
            assert retried.status_code == 202, retried.text
            assert retried.json()["status"] == "in_progress"
            assert retried.json()["error"] is None
            done = wait_job(http, job["id"], timeout=180)
            assert done["status"] == "completed", (done, stack.worker.output()[-3000:])
            audio = httpx.get(done["result"]["url"])
            manifest = http.get(done["result"]["manifest_url"]).json()
            refused = http.post(f"/v1/audio/jobs/{job['id']}/retry")
        runs = _runs(stack, job["id"])
    finally:
        stack.stop()
    assert audio.status_code == 200
    assert len(manifest["segments"]) == 12
    assert sorted(runs) == list(range(12))
    assert set(runs.values()) == {1}, runs  # a finished part is never made again
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "job_not_failed"
    assert refused.json()["error"]["type"] == "conflict_error"


def test_retry_after_a_failed_assembly_only_assembles(
        tmp_path: Path, database_url: str, s3_server: S3Server) -> None:
    stack = _stack(tmp_path, database_url, s3_server, NARRATOR_STORAGE_URL="",
                   NARRATOR_OUTPUT_URL_PREFIXES=f"s3://{S3_BUCKET}/out/",
                   NARRATOR_ASSEMBLY_MAX_ATTEMPTS="2")
    try:
        with stack.client() as http:
            s3_server.stop()
            job = http.post("/v1/audio/jobs", json={
                "input": "One part.\n\nAnother part.", "output_url": f"s3://{S3_BUCKET}/out/x"
            }).json()
            failed = wait_job(http, job["id"], timeout=120)
            assert failed["error"]["code"] == "assembly_failed", failed
            s3_server.start()
            assert http.post(f"/v1/audio/jobs/{job['id']}/retry").status_code == 202
            done = wait_job(http, job["id"], timeout=120)
        runs = _runs(stack, job["id"])
    finally:
        stack.stop()
    assert done["status"] == "completed", done
    assert done["result"]["bytes"] > 0
    assert runs == {0: 1, 1: 1}


def test_retry_refuses_unknown_and_running_jobs(tmp_path: Path, database_url: str,
                                                s3_server: S3Server) -> None:
    stack = _stack(tmp_path, database_url, s3_server)
    try:
        with stack.client() as http:
            missing = http.post(f"/v1/audio/jobs/job_{uuid.uuid4().hex}/retry")
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            running = http.post(f"/v1/audio/jobs/{job['id']}/retry")
    finally:
        stack.stop()
    assert missing.status_code == 404
    assert running.status_code == 409
    assert running.json()["error"]["code"] == "job_not_failed"
