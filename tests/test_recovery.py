"""Recovery in seconds, with default settings: a dead worker's segments move on at once.

Real `narrator api` and `narrator worker` processes with Piper, on Postgres and Redis and in
embedded mode (SQLite, the filesystem broker). No setting is shortened: workers beat every
5 s, one silent for 20 s is dead, and every worker's reaper looks every 10 s.
"""

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import base_env, fresh_database, redis_url
from tests.support import (
    PIPER_IN_FLIGHT,
    Process,
    Stack,
    log_events,
    narrator,
    start_stack,
    wait_for,
    wait_job,
    wait_segments,
)

PARAGRAPH = ("The tide came in over the flats before anyone had noticed, and the birds rose "
             "together from the water in one long grey sheet. ") * 3
BOOK = {"input": "\n\n".join([PARAGRAPH] * 12), "response_format": "wav"}
RECOVERY_SECONDS = 60  # the bound from the kill to the job's completion


@pytest.fixture(params=["postgres+redis", "embedded"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """An API and a worker with default settings: on Postgres and Redis, or embedded."""
    if request.param == "embedded":
        env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
            "NARRATOR_DATA_DIR": str(tmp_path / "data"), "NARRATOR_LOG_JSON": "1"}
        migrate = Process(narrator("migrate"), env, tmp_path / "migrate.log").start()
        assert migrate.popen is not None
        assert migrate.popen.wait(60) == 0, migrate.output()
        started = start_stack(tmp_path, env)
        yield started
        started.stop()
        return
    redis.Redis.from_url(redis_url(2)).flushdb()
    with fresh_database() as url:  # a reaper of its own: it sees only this test's jobs
        started = start_stack(tmp_path, base_env(tmp_path, url, 2))
        yield started
        started.stop()


def _worker(stack: Stack, name: str) -> Process:
    worker = Process(narrator("worker"), stack.env, stack.worker.log.with_name(name)).start()
    wait_for(lambda: "engine.ready" in worker.output(), 60, f"worker {name}")
    return worker


def _attempts(http: httpx.Client, job: dict[str, Any]) -> list[int]:
    manifest = http.get(job["result"]["manifest_url"]).json()
    return [s["attempts"] for s in manifest["segments"]]


def test_a_killed_workers_job_completes_within_a_minute(stack: Stack) -> None:
    with stack.client() as http:
        job = http.post("/v1/audio/jobs", json=BOOK).json()
        wait_segments(http, job["id"], 2)
        stack.worker.stop(signal.SIGKILL)
        killed = time.monotonic()
        stack.worker = _worker(stack, "worker-2.log")
        done = wait_job(http, job["id"], timeout=RECOVERY_SECONDS + 30)
        recovered = time.monotonic() - killed
        attempts = _attempts(http, done)
    assert done["status"] == "completed", done
    assert recovered < RECOVERY_SECONDS, recovered
    print(f"kill to completed: {recovered:.1f} s")  # docs/operations.md's figure (pytest -s)
    assert len(attempts) == 12  # full length: nothing lost
    assert max(attempts) <= 2
    assert sum(a - 1 for a in attempts) <= PIPER_IN_FLIGHT  # only the segments in flight


def test_when_one_of_two_workers_dies_the_other_finishes_the_job(stack: Stack) -> None:
    other = _worker(stack, "worker-other.log")
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 2)
            stack.worker.stop(signal.SIGKILL)
            killed = time.monotonic()
            done = wait_job(http, job["id"], timeout=RECOVERY_SECONDS + 30)
            recovered = time.monotonic() - killed
            attempts = _attempts(http, done)
    finally:
        other.stop()
    assert done["status"] == "completed", done
    assert recovered < RECOVERY_SECONDS, recovered
    assert len(attempts) == 12
    assert sum(a - 1 for a in attempts) <= PIPER_IN_FLIGHT


SPEECH = {"input": " ".join([PARAGRAPH] * 9)[:3500], "voice": "joe"}  # ~3 minutes of speech
SILENCE_SECONDS = 5.0  # SYNC_SILENCE_SECONDS' default


def _speaking(stack: Stack) -> bool:
    """Say whether the worker has sent a sync request's first frame (it took the request)."""
    broker = stack.env.get("NARRATOR_BROKER_URL")
    if broker:
        return bool(redis.Redis.from_url(broker).keys("narrator:speech:*"))
    channels = Path(stack.env["NARRATOR_DATA_DIR"]) / "channels"
    return channels.exists() and any(channels.iterdir())


def _kill_worker_when_speaking(stack: Stack) -> float:
    wait_for(lambda: _speaking(stack), 30, "the worker to take the sync request", 0.02)
    time.sleep(0.5)  # well inside the request: Piper takes seconds for this text
    assert stack.worker.popen is not None
    assert stack.worker.popen.poll() is None
    os.killpg(stack.worker.popen.pid, signal.SIGKILL)
    return time.monotonic()


def test_a_sync_request_whose_worker_dies_gets_a_503_within_seconds(stack: Stack) -> None:
    """Default settings: not SYNC_TIMEOUT_SECONDS (120 s) but the silence limit (5 s)."""
    from concurrent.futures import ThreadPoolExecutor

    with stack.client() as http, ThreadPoolExecutor(1) as pool:
        answer = pool.submit(http.post, "/v1/audio/speech", json=SPEECH)
        killed = _kill_worker_when_speaking(stack)
        response = answer.result(timeout=60)
        waited = time.monotonic() - killed
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "worker_lost"
    assert error["type"] == "service_unavailable"
    assert response.headers["Retry-After"] == "1"
    print(f"kill to 503: {waited:.1f} s")  # pytest -s shows it
    assert SILENCE_SECONDS - 1.5 <= waited <= SILENCE_SECONDS + 5, waited


def test_a_stream_whose_worker_dies_breaks_within_seconds(stack: Stack) -> None:
    """A stream that has begun cannot turn into a 503: its transfer is cut instead, so the
    client sees an error rather than a short answer that looks complete."""
    received = 0
    with stack.client() as http, http.stream("POST", "/v1/audio/speech", json=SPEECH | {
            "response_format": "pcm", "stream_format": "audio"}) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()
        received += len(next(chunks))
        killed = _kill_worker_when_speaking(stack)
        with pytest.raises(httpx.RemoteProtocolError):
            received += sum(len(chunk) for chunk in chunks)
        waited = time.monotonic() - killed
    assert received > 0
    assert waited <= SILENCE_SECONDS + 5, waited


@contextlib.contextmanager
def _gpu_job(tmp_path: Path, frames: int,
             **settings: str) -> Iterator[tuple[Stack, httpx.Client, dict[str, Any]]]:
    """A GPU-style stack (the engine double at 10 ms a frame, 4 in flight, 6 threads) on
    Postgres and Redis, running a 6-segment job of `frames` frames a segment."""
    from tests.support import gpu_double_env

    redis.Redis.from_url(redis_url(1)).flushdb()
    with fresh_database() as url:
        stack = start_stack(tmp_path, base_env(tmp_path, url, 1) | gpu_double_env() | {
            "NARRATOR_VLLM_MAX_IN_FLIGHT": "4", "NARRATOR_WORKER_THREADS": "6",
            "NARRATOR_VLLM_WARMUP_TOKENS": "20", "NARRATOR_QUALITY_RETRIES": "0"} | settings)
        try:
            with stack.client() as http:
                book = "\n\n".join(f"Paragraph {n} of the book." for n in range(6))
                job = http.post("/v1/audio/jobs", json={
                    "input": book, "response_format": "wav", "max_new_tokens": frames}).json()
                wait_for(lambda: http.get(f"/v1/audio/jobs/{job['id']}").json()["status"]
                         == "in_progress", 30, "the job to start")
                yield stack, http, job
        finally:
            stack.stop()


def test_sigterm_past_the_grace_period_hands_the_segments_back_at_once(tmp_path: Path) -> None:
    """A GPU-style worker (the engine double, 8 s segments, 4 in flight) gets SIGTERM. Its
    segments outlast WORKER_SHUTDOWN_GRACE_SECONDS, shortened here from 25 s to 2 s so the
    test does not wait 25 s (the mechanism is the same): the worker gives them back and
    exits, and another worker runs them at once (no reaper involved: its dead-worker sweep
    would need WORKER_DEAD_SECONDS first). No segment completes twice. A worker whose
    segments end within the grace period just finishes them (tests/test_resume.py)."""
    with _gpu_job(tmp_path, 800, NARRATOR_WORKER_SHUTDOWN_GRACE_SECONDS="2") as (
            stack, http, job):
        time.sleep(2.0)  # 4 segments in the engine, none near its end (8 s each)
        assert stack.worker.popen is not None
        stopped = time.monotonic()
        stack.worker.popen.send_signal(signal.SIGTERM)
        stack.worker.popen.wait(30)
        exited = time.monotonic() - stopped
        first = stack.worker.output()
        second = _worker(stack, "worker-2.log")
        try:
            done = wait_job(http, job["id"], timeout=120)
        finally:
            second.stop()
    print(f"SIGTERM to exit: {exited:.1f} s")  # pytest -s shows it
    assert exited < 2 + 8, exited  # the grace period, not the segments' 8 s
    handed = [e for e in log_events(first) if e["event"] == "worker.handed_back"]
    assert handed, first[-3000:]
    assert handed[0]["segments"] >= 4  # those in the engine, and any taken off the broker
    assert "segment.done" not in first
    assert done["status"] == "completed", done
    assert done["segments"]["done"] == 6
    key = str(uuid.UUID(hex=job["id"].removeprefix("job_")))
    runs = [line for line in second.output().splitlines()
            if '"segment.done"' in line and key in line]
    assert len(runs) == 6


def test_a_gpu_workers_engine_child_killed_mid_job_restarts_and_the_job_completes(
        tmp_path: Path) -> None:
    """SIGKILL the engine's child process (an OOM kill, a driver fault) of a GPU-style worker
    running over the engine double: the requests it held fail, their segments go back to
    pending and run again on a new child, default retry settings; the worker never stops."""
    with _gpu_job(tmp_path, 300) as (stack, http, job):
        time.sleep(1.0)  # segments in the engine (3 s each)
        started = [e for e in log_events(stack.worker.output())
                   if e["event"] == "engine.process_started" and e["role"] == "batch"]
        os.kill(started[-1]["pid"], signal.SIGKILL)
        done = wait_job(http, job["id"], timeout=120)
        log = stack.worker.output()
        worker_alive = stack.worker.popen is not None and stack.worker.popen.poll() is None
    assert done["status"] == "completed", (done, log[-3000:])
    assert done["segments"]["done"] == 6
    events = log_events(log)
    batch = [e["pid"] for e in events
             if e["event"] == "engine.process_started" and e["role"] == "batch"]
    standbys = [e["pid"] for e in events
                if e["event"] == "engine.standby_started" and e["role"] == "batch"]
    assert len(batch) == 2  # the child was started again: from the standby started first
    assert batch[1] == standbys[0]
    assert worker_alive


def test_a_recycled_gpu_worker_keeps_its_engine_warm(tmp_path: Path) -> None:
    """A GPU-style worker (the engine double in its child process) recycles during a job
    (WORKER_MAX_TASKS=4) and once more on SIGHUP: each new image of the worker adopts the
    same engine child, skips the warm-up, and the job completes with every segment once;
    sync speech works after the last recycle."""
    with _gpu_job(tmp_path, 100, NARRATOR_WORKER_MAX_TASKS="4",  # the batch engine alone:
                  NARRATOR_VLLM_REALTIME_ENGINE="false") as (stack, http, job):  # see below
        done = wait_job(http, job["id"], timeout=180)
        assert stack.worker.popen is not None
        before = stack.worker.output().count('"engine.process_adopted"')
        wait_for(lambda: stack.worker.output().count('"engine.ready"') == before + 1, 60,
                 "the last recycle to be ready")
        stack.worker.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: stack.worker.output().count('"engine.ready"') == before + 2, 60,
                 "the worker to recycle on SIGHUP")
        speech = http.post("/v1/audio/speech", json={
            "input": "After the recycle.", "voice": "ryan", "max_new_tokens": 50,
            "response_format": "wav"}, timeout=60)
        log = stack.worker.output()
        alive = stack.worker.popen.poll() is None
    assert done["status"] == "completed", (done, log[-3000:])
    events = log_events(log)
    started = [e["pid"] for e in events if e["event"] == "engine.process_started"]
    adopted = [e["pid"] for e in events if e["event"] == "engine.process_adopted"]
    assert len(started) == 1, log[-3000:]  # one engine start for the whole test
    assert len(adopted) >= 2
    assert set(adopted) == set(started)
    assert sum(e["event"] == "engine.warm_up_skipped" for e in events) == len(adopted)
    assert sum(e["event"] == "worker.recycling" and e["reason"] == "SIGHUP"
               for e in events) == 1
    assert speech.status_code == 200, speech.text
    assert alive
    key = str(uuid.UUID(hex=job["id"].removeprefix("job_")))
    runs = sorted(e["segment"] for e in events
                  if e["event"] == "segment.done" and e.get("job_id") == key)
    assert runs == list(range(6))


def test_a_recycled_gpu_worker_keeps_its_realtime_partition_too(tmp_path: Path) -> None:
    """With its realtime partition warm, a GPU-style worker recycles on SIGHUP: its new image
    adopts both engine children (no engine starts again, no warm-up runs), the partition is
    ready again, and sync speech goes to it beside a job."""
    with _gpu_job(tmp_path, 300) as (stack, http, job):
        wait_for(lambda: '"engine.realtime_ready"' in stack.worker.output(), 60,
                 "the realtime partition")
        assert stack.worker.popen is not None
        mark = len(stack.worker.output())
        stack.worker.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: '"engine.realtime_ready"' in stack.worker.output()[mark:], 60,
                 "the partition after the recycle")
        speech = http.post("/v1/audio/speech", json={
            "input": "After the recycle.", "voice": "ryan", "max_new_tokens": 50,
            "response_format": "wav"}, timeout=60)
        done = wait_job(http, job["id"], timeout=180)
        after = log_events(stack.worker.output()[mark:])
    assert speech.status_code == 200, speech.text
    assert done["status"] == "completed", done
    assert sum(e["event"] == "engine.process_adopted" for e in after) == 2
    assert not any(e["event"] == "engine.process_started" for e in after)
    assert sum(e["event"] == "engine.warm_up_skipped" for e in after) == 2


@pytest.mark.parametrize("limit", [{"NARRATOR_WORKER_MAX_TASKS": "4"},
                                   {"NARRATOR_WORKER_MAX_RSS_MB": "1"}])
def test_a_recycled_worker_loses_no_segment_and_runs_none_twice(
        tmp_path: Path, limit: dict[str, str]) -> None:
    """Recycling under limits the worker passes at once (4 tasks; 1 MiB of RSS, so it
    restarts after its first task every time): it stops as on SIGTERM, execs itself, and
    the job still completes with every segment synthesised exactly once."""
    redis.Redis.from_url(redis_url(1)).flushdb()
    with fresh_database() as url:
        stack = start_stack(tmp_path, base_env(tmp_path, url, 1) | limit)
        try:
            with stack.client() as http:
                book = {"input": "\n\n".join([PARAGRAPH[:150]] * 8), "response_format": "wav"}
                job = http.post("/v1/audio/jobs", json=book).json()
                done = wait_job(http, job["id"], timeout=240)
            # The job may complete while the last recycle's new image warms up.
            wait_for(lambda: stack.worker.output().count('"engine.ready"')
                     > stack.worker.output().count("worker.recycling"), 60,
                     "the last recycle to be ready")
            log = stack.worker.output()
            alive = stack.worker.popen is not None and stack.worker.popen.poll() is None
        finally:
            stack.stop()
    assert done["status"] == "completed", (done, log[-3000:])
    assert log.count("worker.recycling") >= 2
    assert log.count('"engine.ready"') >= 3  # each recycled process warmed up again
    assert alive  # the same process (exec keeps the pid): a supervisor sees no exit
    key = str(uuid.UUID(hex=job["id"].removeprefix("job_")))
    runs = [json.loads(line)["segment"] for line in log.splitlines()
            if line.startswith("{") and '"segment.done"' in line and key in line]
    assert sorted(runs) == list(range(8))


def test_a_live_session_whose_worker_dies_closes_within_seconds(stack: Stack) -> None:
    """`WS /v1/audio/speech/stream`: the worker speaking a sentence is killed; the session
    gets a `worker_lost` error and close code 1011 within the silence limit (defaults)."""
    import json

    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    words = ("the harbour was quiet and the boats rocked slowly at their moorings " * 15)[:900]
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    events = []
    with connect(url, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.send(json.dumps({"type": "text.delta", "text": words}))  # one piece, no end
        ws.send(json.dumps({"type": "text.flush"}))
        killed = _kill_worker_when_speaking(stack)
        with contextlib.suppress(ConnectionClosed):
            while True:
                frame = ws.recv(timeout=60)
                if isinstance(frame, str):
                    events.append(json.loads(frame))
        waited = time.monotonic() - killed
        assert ws.close_code == 1011
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == "worker_lost"
    assert waited <= SILENCE_SECONDS + 5, waited
