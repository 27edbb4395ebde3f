"""Bring the shipped docker-compose.yml up with podman-compose (and override.yml) and use it as
a user would, through the API port: run by scripts/compose-check.sh once the images exist.

Podman 4.3 (Debian bookworm's) runs health checks only from systemd timers and cannot wait
for `service_healthy` or `service_completed_successfully`, so the services start in the
order those conditions give: Postgres, Redis and S3 until their health checks pass (run
here with `podman healthcheck run`), then the one-shot jobs until they exit 0, then the API
and the workers. Then:
1. sync speech through the official OpenAI SDK;
2. a chaptered job with subtitles, its files read back from the S3 server;
3. a job whose worker container is killed mid-job: its restart policy restarts it and the
   job completes;
4. `down` (volumes kept) and `up` again: the jobs and their files are still there.
"""

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import httpx
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "narrator-check"
API = "http://127.0.0.1:18000"
S3 = "http://127.0.0.1:19000"
COMPOSE = [sys.executable, "-m", "podman_compose", "-f", str(ROOT / "docker-compose.yml"),
           "-f", str(Path(__file__).with_name("override.yml")), "-p", PROJECT]
INFRA = ("postgres", "redis", "minio")
ONE_SHOTS = ("minio-init", "migrate")
APP = ("api", "worker-cpu", "worker-kokoro")
PARAGRAPH = ("The tide came in over the flats before anyone had noticed, and the birds rose "
             "together from the water in one long grey sheet. ")


def say(text: str) -> None:
    print(f"compose-check: {text}", flush=True)


def compose(*args: str) -> None:
    subprocess.run([*COMPOSE, *args], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def container(service: str) -> str:
    return f"{PROJECT}_{service}_1"


def until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"compose-check: {what} did not happen within {seconds:.0f} s")
        time.sleep(1)


def healthy(service: str) -> bool:
    return subprocess.run(["podman", "healthcheck", "run", container(service)],
                          capture_output=True).returncode == 0


def up() -> None:
    """Start the stack in the order its depends_on conditions give."""
    compose("up", "-d", "--no-deps", *INFRA)
    for service in INFRA:
        until(functools.partial(healthy, service), 120, f"{service}'s health check")
    compose("up", "-d", "--no-deps", *ONE_SHOTS)
    for service in ONE_SHOTS:
        code = podman("wait", container(service))
        if code != "0":
            print(podman("logs", "--tail", "40", container(service)))
            raise SystemExit(f"compose-check: {service} exited {code}")
    compose("up", "-d", "--no-deps", *APP)
    for service in APP:  # the workers' checks: consuming, engine warm (READY_FILE)
        until(functools.partial(healthy, service), 180, f"{service}'s health check")
    until(lambda: len(httpx.get(f"{API}/v1/models").json()["data"]) >= 2, 60,
          "both CPU workers' models listed")
    say("stack up: " + ", ".join(f"{s} healthy" for s in (*INFRA, *APP)))


def wait_job(http: httpx.Client, job_id: str, seconds: float = 300) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def done() -> bool:
        nonlocal job
        job = http.get(f"/v1/audio/jobs/{job_id}").json()
        return job["status"] in ("completed", "failed", "cancelled")

    until(done, seconds, f"job {job_id}")
    return job


def s3_keys() -> set[str]:
    client = boto3.client("s3", endpoint_url=S3, aws_access_key_id="narrator",
                          aws_secret_access_key="narrator-secret", region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="narrator")
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def sync_speech() -> None:
    client = OpenAI(base_url=f"{API}/v1", api_key="unused")
    audio = client.audio.speech.create(model="piper", voice="joe", input="Hello from compose.",
                                       response_format="wav").content
    assert audio[:4] == b"RIFF", audio[:16]
    assert len(audio) > 20_000, len(audio)
    say(f"sync speech through the OpenAI SDK: {len(audio)} bytes of WAV")


def chaptered_job(http: httpx.Client) -> dict[str, Any]:
    body = {"model": "piper", "voice": "joe", "response_format": "mp3",
            "subtitles": ["srt", "vtt"],
            "chapters": [{"title": "One", "input": PARAGRAPH * 2},
                         {"title": "Two", "input": PARAGRAPH * 2}]}
    job = wait_job(http, http.post("/v1/audio/jobs", json=body).json()["id"])
    assert job["status"] == "completed", job
    result = job["result"]
    hexed = job["id"].removeprefix("job_")
    prefix = f"media/jobs/{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}/"
    stored = sorted(k for k in s3_keys() if k.startswith(prefix))
    for name in ("audio.mp3", "chapters/000.mp3", "chapters/001.mp3", "subtitles.srt",
                 "subtitles.vtt", "manifest.json"):
        assert prefix + name in stored, (name, stored)
    for url in (result["url"], *result["subtitles"].values()):  # presigned S3 URLs
        assert httpx.get(url).status_code == 200, url
    say(f"chaptered job with subtitles: {len(stored)} objects in S3 under {prefix}")
    return job


def killed_worker(http: httpx.Client) -> dict[str, Any]:
    body = {"model": "piper", "voice": "joe", "response_format": "mp3",
            "input": "\n\n".join([PARAGRAPH * 3] * 12)}
    job_id = http.post("/v1/audio/jobs", json=body).json()["id"]
    until(lambda: http.get(f"/v1/audio/jobs/{job_id}").json()["segments"]["done"] >= 2, 120,
          "two segments before the kill")
    before = podman("inspect", "--format", "{{.RestartCount}}", container("worker-cpu"))
    # The worker process dies as in a crash or an OOM kill (`podman kill` is an operator's
    # stop, which a restart policy leaves stopped).
    os.kill(int(podman("inspect", "--format", "{{.State.Pid}}", container("worker-cpu"))),
            signal.SIGKILL)
    say("worker-cpu's process killed mid-job (SIGKILL from the host)")
    until(lambda: podman("inspect", "--format", "{{.RestartCount}} {{.State.Running}}",
                         container("worker-cpu")) == f"{int(before) + 1} true", 60,
          "worker-cpu restarted by its restart policy")
    until(functools.partial(healthy, "worker-cpu"), 180, "the restarted worker's health check")
    job = wait_job(http, job_id)
    assert job["status"] == "completed", job
    say(f"restarted by its restart policy, healthy again; the job completed ({job['segments']})")
    return job


def main() -> None:
    subprocess.run([*COMPOSE, "down", "-v"], cwd=ROOT, capture_output=True)
    started = time.monotonic()
    up()
    with httpx.Client(base_url=API, timeout=120) as http:
        sync_speech()
        jobs = [chaptered_job(http), killed_worker(http)]
    compose("down")  # volumes stay
    say("down (volumes kept); up again")
    up()
    with httpx.Client(base_url=API, timeout=120) as http:
        for job in jobs:
            again = http.get(f"/v1/audio/jobs/{job['id']}").json()
            assert again["status"] == "completed", again
            assert http.get(again["result"]["url"]).status_code == 200
    say(f"after down and up, both jobs and their audio are there; "
        f"{time.monotonic() - started:.0f} s in all")
    print(json.dumps({"ok": True, "seconds": round(time.monotonic() - started)}))


if __name__ == "__main__":
    main()
