"""A GPU worker as deployed, on the CPU: sync speech never waits behind batch work, an engine
that cannot start consumes nothing, and assembly goes to CPU workers while any run.

Real API and `narrator worker` processes on Postgres and Redis, with NARRATOR_ENGINE=
vllm-omni: the real adapter and engine process run over the CPU engine double
(tests/doubles/site puts it where the worker imports vllm_omni), which takes 10 ms per frame
like a GPU step. A job of 24 segments of 300 frames (3 s each) holds all 4 engine slots and
all 6 pool threads for about 18 s; a sync request of 25 frames must still be answered in
well under one segment's time.
"""

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import base_env, redis_url
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from tests.support import (
    Process,
    Stack,
    gpu_double_env,
    log_events,
    narrator,
    start_stack,
    wait_for,
    wait_job,
)

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "data" / "qwen3-tts-0.6b-customvoice"
SEGMENT_SECONDS = 3.0  # 300 frames at 10 ms


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    """API plus one GPU-style worker (threads pool) with 4 engine slots and 6 threads."""
    redis.Redis.from_url(redis_url(5)).flushdb()
    tmp = tmp_path_factory.mktemp("gpu-double")
    env = base_env(tmp, database_url, 5) | gpu_double_env() | {
        "NARRATOR_VLLM_MAX_IN_FLIGHT": "4", "NARRATOR_WORKER_THREADS": "6",
        "NARRATOR_VLLM_WARMUP_TOKENS": "20", "NARRATOR_QUALITY_RETRIES": "0",
        "NARRATOR_TEST_OMNI_STEPS": str(tmp / "steps.jsonl")}
    stack = start_stack(tmp, env)
    wait_for(lambda: "engine.realtime_ready" in stack.worker.output(), 60,
             "the realtime partition")
    yield stack
    stack.stop()


def _saturate(http: httpx.Client) -> str:
    book = "\n\n".join(f"Paragraph {n} of the long job." for n in range(24))
    created = http.post("/v1/audio/jobs", json={"input": book, "response_format": "wav",
                                                "max_new_tokens": 300})
    assert created.status_code == 202, created.text
    job_id: str = created.json()["id"]
    deadline = time.monotonic() + 30
    while http.get(f"/v1/audio/jobs/{job_id}").json()["status"] != "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # every pool thread now holds a segment, in the engine or waiting for it
    return job_id


def test_a_saturated_worker_answers_sync_and_streamed_speech_at_once(gpu_stack: Stack) -> None:
    with gpu_stack.client() as http:
        job_id = _saturate(http)
        timings = []
        for stream in (False, True, False, True):
            body = {"input": "Right now, please.", "voice": "ryan", "max_new_tokens": 25,
                    "response_format": "pcm" if stream else "wav"}
            started = time.monotonic()
            if stream:
                with http.stream("POST", "/v1/audio/speech",
                                 json=body | {"stream_format": "audio"}) as response:
                    assert response.status_code == 200
                    chunks = response.iter_bytes()
                    first = next(chunks)
                    timings.append(time.monotonic() - started)
                    assert len(first + b"".join(chunks)) == 25 * 10 * 2  # 16-bit samples
            else:
                response = http.post("/v1/audio/speech", json=body)
                assert response.status_code == 200, response.text
                timings.append(time.monotonic() - started)
        job = http.get(f"/v1/audio/jobs/{job_id}").json()
        assert job["status"] == "in_progress"
        assert job["segments"]["done"] < job["segments"]["total"] - 4  # still saturated
        # The request itself takes 0.25 s on the double; behind the batch it took >= 3 s.
        assert max(timings) < SEGMENT_SECONDS * 0.5, timings
        assert wait_job(http, job_id, timeout=120)["status"] == "completed"


def test_realtime_requests_run_on_an_engine_that_holds_no_batch_work(gpu_stack: Stack) -> None:
    """The realtime partition (workers/runtime/partition.py): with a job filling the batch engine,
    every step of every sync and streamed request runs on the second engine (the realtime
    deploy config), and no step of theirs carries a batch sequence. The double logs each
    realtime step with the priorities of everything its engine held then."""
    steps = Path(gpu_stack.env["NARRATOR_TEST_OMNI_STEPS"])
    with gpu_stack.client() as http:
        assert http.get("/readyz").json()["workers"]["realtime"]["ready"] == 1
        job_id = _saturate(http)
        mark = steps.stat().st_size
        for stream in (False, True, True):
            body = {"input": "Mine alone. Nothing else.", "voice": "ryan",
                    "max_new_tokens": 50, "response_format": "pcm"}
            if stream:
                with http.stream("POST", "/v1/audio/speech",
                                 json=body | {"stream_format": "audio"}) as response:
                    assert response.status_code == 200
                    assert len(response.read()) > 0
            else:
                assert http.post("/v1/audio/speech", json=body).status_code == 200
        assert http.get(f"/v1/audio/jobs/{job_id}").json()["status"] == "in_progress"
        logged = [json.loads(line) for line in steps.read_text()[mark:].splitlines()]
        assert len({e["request"] for e in logged}) >= 4  # a sync answer in two pieces, 2 streams
        assert {e["engine"] for e in logged} == {"qwen3_tts_realtime.yaml"}, logged[:3]
        assert all(set(e["held"]) == {0} for e in logged), logged
        assert wait_job(http, job_id, timeout=120)["status"] == "completed"


def test_without_its_realtime_engine_a_worker_answers_on_the_batch_engine(
        tmp_path: Path, database_url: str) -> None:
    """A realtime partition that cannot start (here: its deploy config is missing) leaves
    the worker ready, says why in /readyz, and sync speech goes to the batch engine."""
    redis.Redis.from_url(redis_url(14)).flushdb()
    env = base_env(tmp_path, database_url, 14) | gpu_double_env() | {
        "NARRATOR_VLLM_REALTIME_DEPLOY_CONFIG": str(tmp_path / "missing.yaml"),
        "NARRATOR_VLLM_WARMUP_TOKENS": "20", "NARRATOR_VLLM_MAX_IN_FLIGHT": "4"}
    stack = start_stack(tmp_path, env)
    try:
        wait_for(lambda: "engine.realtime_failed" in stack.worker.output(), 60,
                 "the realtime partition to fail")
        with stack.client() as http:
            wait_for(lambda: http.get("/readyz").json()["workers"]["realtime"]["failed"] == 1,
                     10, "/readyz to count the failed partition")
            assert http.get("/readyz").json()["workers"]["ready"] == 1
            response = http.post("/v1/audio/speech", json={
                "input": "Still here.", "voice": "ryan", "max_new_tokens": 20,
                "response_format": "wav"})
            assert response.status_code == 200, response.text
    finally:
        stack.stop()


def test_as_many_streams_as_realtime_sequences_all_start_at_once(gpu_stack: Stack) -> None:
    """The default lane has a thread for each of the VLLM_REALTIME_SEQUENCES (16) the deploy
    config keeps: 12 streamed answers of 2 s each sent at once beside a saturating job all
    start within the first second. With fewer lane threads than requests, the rest would
    wait on the broker for a whole answer (2 s) to end."""
    frames = 200  # 2 s on the double

    def first_audio(http: httpx.Client) -> float:
        started = time.monotonic()
        with http.stream("POST", "/v1/audio/speech", json={
                "input": "All at once, please.", "voice": "ryan", "max_new_tokens": frames,
                "response_format": "pcm", "stream_format": "audio"}) as response:
            assert response.status_code == 200
            chunks = response.iter_bytes()
            next(chunks)
            first = time.monotonic() - started
            assert len(b"".join(chunks)) > 0
        return first

    with gpu_stack.client() as http:
        job_id = _saturate(http)
        with ThreadPoolExecutor(12) as pool:
            firsts = list(pool.map(first_audio, [http] * 12))
        assert http.get(f"/v1/audio/jobs/{job_id}").json()["status"] == "in_progress"
        assert max(firsts) < frames * 0.01 / 2, sorted(firsts)
        assert wait_job(http, job_id, timeout=120)["status"] == "completed"


def test_a_book_with_paragraphs_that_have_nothing_to_say_completes_on_the_gpu_path(
        gpu_stack: Stack) -> None:
    """Punctuation-only paragraphs are silence, never segments (the engine is never asked to
    speak "..." or a dash), and the book completes with its cues in order."""
    from tests.test_hostile_jobs import BREAKS

    book = "\n\n".join(["It was late."] + [f"{mark}\n\nLine {n}." for n, mark
                                            in enumerate(BREAKS)])
    with gpu_stack.client() as http:
        created = http.post("/v1/audio/jobs", json={"input": book, "response_format": "wav",
                                                    "max_new_tokens": 20, "subtitles": ["srt"]})
        assert created.status_code == 202, created.text
        job = wait_job(http, created.json()["id"], timeout=120)
    assert job["status"] == "completed", job
    assert job["segments"]["total"] == 1 + len(BREAKS)


def test_a_sync_answer_of_sentences_comes_back_whole_with_gaps(gpu_stack: Stack) -> None:
    """Four sentences, spoken at once in four pieces that share max_new_tokens (SYNC_PIECES
    defaults to 4 on vLLM-Omni), come back as one wav: their frames plus three gaps."""
    with gpu_stack.client() as http:
        response = http.post("/v1/audio/speech", json={
            "input": "The first one. Then a second. A third follows. And the last.",
            "voice": "ryan", "max_new_tokens": 200, "response_format": "wav"})
        assert response.status_code == 200, response.text
    frames_seconds = 200 * 10 / 24000  # the double's 10 samples a frame at 24 kHz
    duration = float(response.headers["x-audio-duration"])
    assert abs(duration - (frames_seconds + 3 * 0.25)) <= 2 * 10 / 24000, duration


def test_a_worker_whose_engine_cannot_start_consumes_nothing_and_says_why(
        tmp_path: Path, database_url: str) -> None:
    redis.Redis.from_url(redis_url(14)).flushdb()  # not the module's stack's broker
    # vLLM-Omni is not installed here, and the double is not on the path: the engine fails.
    env = base_env(tmp_path, database_url, 14) | gpu_double_env() | {"PYTHONPATH": str(ROOT)}
    stack = start_stack(tmp_path, env, worker=False)
    try:
        with stack.client() as http:
            created = http.post("/v1/audio/jobs", json={"input": "Wait for a worker."})
            assert created.status_code == 202
            job_id = created.json()["id"]
            stack.worker.start()
            assert stack.worker.popen is not None
            assert stack.worker.popen.wait(120) == 3, stack.worker.output()[-3000:]
            assert http.get(f"/v1/audio/jobs/{job_id}").json()["status"] == "queued"
            # The API reads the registry at most every 2 s (api.catalogue.CACHE_SECONDS).
            wait_for(lambda: bool(http.get("/readyz").json()["workers"]["failed"]), 10,
                     "/readyz to list the failed worker")
            workers = http.get("/readyz").json()["workers"]
            assert workers["ready"] == 0
            assert len(workers["failed"]) == 1
            assert "engine failed to start" in workers["failed"][0]["reason"]
    finally:
        stack.stop()


@pytest.mark.parametrize("kind", ["piper", "assembly-only"])
def test_assembly_goes_to_a_cpu_worker_while_one_runs(gpu_stack: Stack, tmp_path: Path,
                                                      kind: str) -> None:
    """Compose's CPU worker (Piper) or a worker given only `--queues assembly`; the latter
    has the GPU worker's settings but no engine double on its path: it must load no engine."""
    if kind == "piper":
        env = gpu_stack.env | {"NARRATOR_ENGINE": "piper"}
        env.pop("NARRATOR_MODEL")
        argv, ready = narrator("worker"), "engine.ready"
    else:
        env = gpu_stack.env | {"PYTHONPATH": str(ROOT)}
        argv, ready = narrator("worker", "--queues", "assembly"), "worker.ready"
    cpu = Process(argv, env, tmp_path / "cpu-worker.log").start()
    try:
        wait_for(lambda: ready in cpu.output(), 60, "the CPU worker")
        with gpu_stack.client() as http:
            created = http.post("/v1/audio/jobs", json={
                "input": "One.\n\nTwo.\n\nThree.", "max_new_tokens": 20})
            job = wait_job(http, created.json()["id"], timeout=60)
        assert job["status"] == "completed", job
        job_id = str(uuid.UUID(hex=job["id"].removeprefix("job_")))

        def completed(log: str) -> bool:
            return any("job.completed" in line and job_id in line for line in log.splitlines())

        assert completed(cpu.output()), cpu.output()[-2000:]
        assert not completed(gpu_stack.worker.output())
        if kind == "assembly-only":
            assert "engine." not in cpu.output()
    finally:
        cpu.stop()


def test_an_assembly_worker_in_processes_assembles_and_stops_as_one(
        gpu_stack: Stack, tmp_path: Path) -> None:
    """`narrator worker --queues assembly --processes 2` (what a host of 16 cores or more
    starts by default): two ordinary workers under one supervisor. They take the MP3
    fragments and the assembly of a GPU job, READY_FILE exists once both are ready, and one
    SIGTERM stops both."""
    ready = tmp_path / "ready"
    env = gpu_stack.env | {"PYTHONPATH": str(ROOT), "NARRATOR_READY_FILE": str(ready)}
    cpu = Process(narrator("worker", "--queues", "assembly", "--processes", "2"), env,
                  tmp_path / "assembly.log").start()
    try:
        wait_for(ready.exists, 90, "both assembly processes to be ready")
        assert cpu.output().count('"worker.ready"') == 2, cpu.output()[-3000:]
        with gpu_stack.client() as http:
            book = "\n\n".join(f"Paragraph {n} of the book." for n in range(8))
            created = http.post("/v1/audio/jobs", json={
                "input": book, "response_format": "mp3", "max_new_tokens": 20})
            job = wait_job(http, created.json()["id"], timeout=90)
        assert job["status"] == "completed", job
        events = log_events(cpu.output())
        key = str(uuid.UUID(hex=job["id"].removeprefix("job_")))
        assert any(e["event"] == "job.completed" and e.get("job_id") == key for e in events)
        assert any(e["event"] == "fragment.encoded" and e.get("job_id") == key for e in events)
        children = [e["pid"] for e in events if e["event"] == "worker.starting"][1:]
        assert len(children) == 2
        assert cpu.popen is not None
        cpu.popen.send_signal(signal.SIGTERM)
        assert cpu.popen.wait(60) == 0
        assert not ready.exists()
        for pid in children:  # each child's warm shutdown ended with the supervisor
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        cpu.stop()
