"""`narrator serve`: SQLite, local media, the filesystem broker and Piper, no services."""

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Process, audio_stats, embedded, free_port, narrator, wait_for, wait_job


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("embedded")
    with embedded(folder) as (url, process):
        yield url, folder / "data"
    assert "Traceback" not in process.output(), process.output()[-3000:]


def test_serve_speaks_and_runs_jobs_with_no_services(served: tuple[str, Path]) -> None:
    url, data = served
    with httpx.Client(base_url=url, timeout=120) as http:
        speech = http.post("/v1/audio/speech", json={"input": "Embedded mode works.",
                                                     "response_format": "wav"})
        assert speech.status_code == 200
        seconds, rms = audio_stats(speech.content, "wav")
        assert seconds > 1.0
        assert rms > 0.02
        job = http.post("/v1/audio/jobs", json={"input": "One. Two. Three.",
                                                "subtitles": ["srt"]}).json()
        job = wait_job(http, job["id"])
        assert job["status"] == "completed", job
        assert job["result"]["url"].startswith(f"{url}/v1/audio/jobs/{job['id']}/content")
        assert http.get(job["result"]["url"]).status_code == 200
    assert (data / "narrator.db").exists()
    assert list((data / "media" / "jobs").glob("*/audio.mp3"))
    assert (data / "broker" / "queue").is_dir()


def test_api_and_worker_started_separately_share_the_data_dir(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")}
    env |= {"NARRATOR_DATA_DIR": str(tmp_path / "data"), "NARRATOR_LOG_JSON": "1"}
    Process(narrator("migrate"), env, tmp_path / "migrate.log").start().popen.wait(60)  # type: ignore[union-attr]
    port = free_port()
    api = Process(narrator("api", "--port", str(port)), env, tmp_path / "api.log").start()
    worker = Process(narrator("worker"), env, tmp_path / "worker.log").start()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{url}/healthz").status_code == 200, 30, "the API")
        with httpx.Client(base_url=url, timeout=120) as http:
            job = wait_job(http, http.post("/v1/audio/jobs", json={"input": "Apart."}
                                           ).json()["id"])
        assert job["status"] == "completed"
    finally:
        api.stop()
        worker.stop()


def test_stopping_serve_with_sigterm_stops_its_worker(tmp_path: Path) -> None:
    """docker stop, systemd and `kill` send SIGTERM to `narrator serve` alone, not to its
    process group: the workers it started (Piper's and Kokoro's) must stop with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NARRATOR_", "PROMETHEUS_"))}
    env |= {"NARRATOR_DATA_DIR": str(tmp_path / "data"), "NARRATOR_LOG_JSON": "1"}
    port = free_port()
    serve = Process(narrator("serve", "--port", str(port)), env, tmp_path / "serve.log").start()
    try:
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200, 60,
                 "narrator serve")
        listed = re.search(r"worker pids ([\d, ]+)\)", serve.output())
        assert listed is not None
        workers = [int(pid) for pid in listed[1].split(", ")]
        assert len(workers) == 2
        assert all(Path(f"/proc/{pid}").exists() for pid in workers)
        assert serve.popen is not None
        os.kill(serve.popen.pid, signal.SIGTERM)  # the parent only
        assert serve.popen.wait(60) == 128 + signal.SIGTERM
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), 30,
                 "the workers to stop")
    finally:
        serve.stop()
