"""Metrics, request ids and structured log fields, read from real processes."""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import base_env
from tests.support import Process, embedded, start_stack, wait_job

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(http: httpx.Client) -> Samples:
    """GET /metrics and return {(sample name, sorted labels): value}."""
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum the samples of `name` whose labels include `labels`."""
    return sum(value for (sample, have), value in samples.items()
               if sample == name and set(labels.items()) <= set(have))


def log_lines(text: str) -> list[dict[str, object]]:
    """The JSON lines of a log."""
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Process]]:
    with embedded(tmp_path_factory.mktemp("observed")) as served:
        yield served


def test_metrics_add_up_the_api_and_the_worker(served: tuple[str, Process]) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=120) as http:
        assert http.post("/v1/audio/speech", json={"input": "Counted once.",
                                                   "response_format": "wav"}).status_code == 200
        with http.stream("POST", "/v1/audio/speech", json={
                "input": "Streamed and counted.", "response_format": "pcm",
                "stream_format": "audio"}) as stream:
            assert stream.status_code == 200
            assert len(stream.read()) > 1000
        job = wait_job(http, http.post("/v1/audio/jobs", json={
            "input": "First sentence. Second sentence."}).json()["id"])
        assert job["status"] == "completed"
        assert http.get("/v1/audio/jobs/job_nonsense").status_code == 404
        samples = scrape(http)
    # The API's own: requests by route template and status, latency, time to first chunk.
    assert total(samples, "narrator_http_requests_total", route="/v1/audio/speech",
                 status="200") == 2
    assert total(samples, "narrator_http_requests_total", route="/v1/audio/jobs/{job_id}",
                 status="404") == 1
    assert total(samples, "narrator_http_request_duration_seconds_count",
                 route="/v1/audio/jobs") >= 1
    assert total(samples, "narrator_speech_first_chunk_seconds_count", streamed="true") == 1
    assert total(samples, "narrator_speech_first_chunk_seconds_count", streamed="false") == 1
    # The worker's, through the shared folder: segments, audio seconds, real-time factor.
    assert total(samples, "narrator_segments_synthesized_total") == job["segments"]["total"]
    job_seconds = total(samples, "narrator_audio_seconds_produced_total", kind="job")
    assert job_seconds == pytest.approx(job["result"]["duration_seconds"], rel=0.3)
    assert total(samples, "narrator_audio_seconds_produced_total", kind="sync") > 1.0
    assert total(samples, "narrator_engine_real_time_factor_count") >= 3
    assert total(samples, "narrator_engine_real_time_factor_sum") > 0
    busy = [v for (name, _), v in samples.items() if name == "narrator_worker_busy_fraction"]
    assert busy
    assert all(0.0 <= v <= 1.0 for v in busy)
    # Read from the database at scrape time.
    assert total(samples, "narrator_jobs", status="completed") == 1
    assert total(samples, "narrator_jobs", status="queued") == 0


def test_every_api_and_worker_line_carries_its_ids(served: tuple[str, Process]) -> None:
    url, process = served
    with httpx.Client(base_url=url, timeout=120) as http:
        response = http.post("/v1/audio/jobs", json={"input": "Logged. Twice over."},
                             headers={"X-Request-Id": "client-42"})
        job = wait_job(http, response.json()["id"])
    request_id = response.headers["x-request-id"]
    assert request_id.startswith("req_")
    assert len(request_id) == 36
    lines = log_lines(process.output())
    access = [line for line in lines if line.get("request_id") == request_id]
    assert access
    assert access[-1]["event"] == "http.request"
    assert access[-1]["route"] == "/v1/audio/jobs"
    assert access[-1]["status"] == 202
    assert access[-1]["client_request_id"] == "client-42"
    assert all("request_id" in line for line in lines if line["event"] == "http.request")
    job_uuid = job["id"].removeprefix("job_")
    done = [line for line in lines if line["event"] == "segment.done"
            and str(line.get("job_id", "")).replace("-", "") == job_uuid]
    assert sorted(int(str(line["segment"])) for line in done) == list(
        range(job["segments"]["total"]))
    assert all(line["task"] == "narrator.synthesize" and line["task_id"] for line in done)
    planned = [line for line in lines if line["event"] == "job.planned"
               and str(line.get("job_id", "")).replace("-", "") == job_uuid]
    assert planned
    assert planned[0]["task"] == "narrator.plan"


def test_queue_depth_counts_what_no_worker_took(tmp_path: Path, database_url: str) -> None:
    import redis

    from tests.conftest import redis_url

    redis.Redis.from_url(redis_url(6)).flushdb()
    stack = start_stack(tmp_path, base_env(tmp_path, database_url, 6), worker=False)
    try:
        with stack.client() as http:
            for _ in range(3):
                assert http.post("/v1/audio/jobs", json={"input": "Waiting."}).status_code == 202
            samples = scrape(http)
    finally:
        stack.stop()
    assert total(samples, "narrator_queue_depth", queue="batch") == 3
    assert total(samples, "narrator_jobs", status="queued") >= 3


LINES_FROM_TWO_THREADS = """
import logging, threading
import structlog
from core.logs import configure
configure(json=True)
log, std = structlog.get_logger(), logging.getLogger("celery.worker")
def ours():
    for n in range(10000):
        log.info("ours", n=n)
def theirs():
    for n in range(10000):
        std.warning("theirs %d", n)
threads = [threading.Thread(target=ours), threading.Thread(target=theirs)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_log_lines_from_threads_never_run_together(tmp_path: Path) -> None:
    """Narrator's structlog lines and the standard library's (Celery, vLLM), logged from two
    threads at once to one stderr, come out one JSON object a line: a log collector that
    reads lines gets every event. (structlog's PrintLogger wrote the newline apart: 219 of
    40,000 such lines ran into others.)"""
    import subprocess
    import sys

    from tests.support import ROOT

    out = tmp_path / "stderr.log"
    with out.open("wb") as sink:
        subprocess.run([sys.executable, "-c", LINES_FROM_TWO_THREADS], cwd=ROOT, stderr=sink,
                       check=True, timeout=120)
    lines = out.read_text().splitlines()
    events = [json.loads(line)["event"] for line in lines]  # each line one object
    assert len(events) == 20000
    assert events.count("ours") == 10000
