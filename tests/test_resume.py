"""A worker SIGKILLed mid-job: after a restart the job completes, redoing at most what was
in flight (the reaper puts the orphaned segment back; manifests count attempts)."""

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from models.db import sql_engine_for
from tests.conftest import base_env
from tests.support import (
    PIPER_IN_FLIGHT,
    Process,
    Stack,
    audio_stats,
    free_port,
    narrator,
    start_stack,
    wait_for,
    wait_job,
    wait_segments,
)

PARAGRAPH = ("The keeper counted the ships that passed the rocks each night, and wrote their "
             "names in a book that nobody else would ever read. ") * 3


@pytest.fixture(scope="module")
def fragile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    import redis

    from tests.conftest import fresh_database, redis_url

    redis.Redis.from_url(redis_url(14)).flushdb()
    tmp = tmp_path_factory.mktemp("fragile")
    with fresh_database() as database_url:
        # Stale after 15 s: a 400-character segment took over 6 s on a loaded 2-core machine
        # and was taken for lost while its worker was still alive.
        env = base_env(tmp, database_url, 14) | {"NARRATOR_SEGMENT_STALE_SECONDS": "15",
                                                 "NARRATOR_REAPER_INTERVAL_SECONDS": "1",
                                                 "NARRATOR_RESULT_TTL_HOURS": "0.002"}  # 7.2 s
        stack = start_stack(tmp, env)
        yield stack
        stack.stop()


def test_sigkilled_worker_costs_at_most_its_in_flight_segment(fragile: Stack) -> None:
    body = {"input": "\n\n".join([PARAGRAPH] * 10), "response_format": "wav"}
    with fragile.client() as http:
        job = http.post("/v1/audio/jobs", json=body).json()
        wait_segments(http, job["id"], 2, timeout=60, what="progress before the kill")
        fragile.worker.stop(signal.SIGKILL)
        killed_at = http.get(f"/v1/audio/jobs/{job['id']}").json()
        assert killed_at["status"] == "in_progress"
        restarted = Process(narrator("worker"), fragile.env,
                            fragile.worker.log.with_name("worker2.log")).start()
        fragile.worker = restarted
        wait_for(lambda: "engine.ready" in restarted.output(), 60, "the restarted worker")
        done = wait_job(http, job["id"], timeout=180)
        assert done["status"] == "completed", done
        manifest = http.get(done["result"]["manifest_url"]).json()
    attempts = [s["attempts"] for s in manifest["segments"]]
    assert len(attempts) == done["segments"]["total"] == 10
    # Only the segments in flight (one per pool thread) ran twice.
    assert attempts.count(1) >= len(attempts) - PIPER_IN_FLIGHT
    assert max(attempts) <= 2


def test_sigterm_finishes_the_segment_in_flight_and_loses_nothing(fragile: Stack) -> None:
    body = {"input": "\n\n".join([PARAGRAPH] * 10), "response_format": "wav"}
    with fragile.client() as http:
        job = http.post("/v1/audio/jobs", json=body).json()
        wait_segments(http, job["id"], 2, timeout=60, what="progress before the SIGTERM")
        worker = fragile.worker
        worker.stop(signal.SIGTERM, timeout=60)  # a warm shutdown: no SIGKILL needed
        assert worker.popen is not None
        assert worker.popen.returncode == 0, worker.output()[-2000:]
        db = sql_engine_for(fragile.env["NARRATOR_DATABASE_URL"])
        with db.connect() as connection:
            running = connection.execute(text(
                "SELECT count(*) FROM segments WHERE job_id = :id AND status = 'running'"),
                {"id": _uuid(job["id"])}).scalar_one()
        db.dispose()
        assert running == 0  # the segment in flight was finished, not orphaned
        restarted = Process(narrator("worker"), fragile.env,
                            worker.log.with_name("worker3.log")).start()
        fragile.worker = restarted
        done = wait_job(http, job["id"], timeout=180)
        assert done["status"] == "completed", done
        manifest = http.get(done["result"]["manifest_url"]).json()
    assert [s["attempts"] for s in manifest["segments"]] == [1] * 10  # nothing ran twice


def test_media_past_its_ttl_is_deleted_by_the_reaper(fragile: Stack) -> None:
    with fragile.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={"input": "Short-lived."}
                                       ).json()["id"])
        assert job["status"] == "completed"
        assert job["expires_at"] - job["completed_at"] in (7, 8)
        folder = fragile.api.log.parent / "media" / "jobs" / _uuid(job["id"])
        assert (folder / "audio.mp3").exists()
        assert (folder / "parts").exists()  # kept for re-renders (KEEP_PARTS), until expiry
        wait_for(lambda: not folder.exists(), 30, "the reaper to delete expired media")
        assert http.get(f"/v1/audio/jobs/{job['id']}").status_code == 404


def _uuid(job_id: str) -> str:
    import uuid

    return str(uuid.UUID(hex=job_id.removeprefix("job_")))


def test_sigterm_on_the_api_drains_the_request_in_flight(fragile: Stack, tmp_path: Path) -> None:
    port = free_port()
    api = Process(narrator("api", "--port", str(port)), fragile.env, tmp_path / "api2.log")
    api.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{url}/healthz").status_code == 200, 30, "the second API")
    body = {"model": "piper", "voice": "joe", "input": PARAGRAPH * 2, "response_format": "wav"}
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, f"{url}/v1/audio/speech", json=body, timeout=120)
        time.sleep(0.3)  # the request is with the worker now
        assert api.popen is not None
        os.killpg(api.popen.pid, signal.SIGTERM)
        response = answer.result()
    assert response.status_code == 200  # answered in full, though the API was stopping
    duration, _ = audio_stats(response.content, "wav")
    assert duration > 5
    # uvicorn re-raises the SIGTERM it handled once it has drained: exit status -15
    assert api.popen.wait(30) in (0, -signal.SIGTERM)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")
