"""Helpers for tests: free ports, real service processes, and audio checks."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from core.catalog import kokoro_installed


def free_port() -> int:
    """Return a TCP port that is free on loopback right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Return `count` different TCP ports that are free on loopback right now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:  # all bound at once: the kernel hands out no port twice
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def log_events(text: str) -> list[dict[str, Any]]:
    """Return the JSON log events in a process's output (the worker's and its engine
    child's, which share one stderr): every object, wherever it starts on its line, so a
    line another ran into still counts (structlog's PrintLogger, replaced in core/logs.py,
    let that happen)."""
    decoder, events = json.JSONDecoder(), []
    for line in text.splitlines():
        at = line.find("{")
        while at != -1:
            try:
                event, end = decoder.raw_decode(line, at)
            except json.JSONDecodeError:
                at = line.find("{", at + 1)
                continue
            if isinstance(event, dict) and "event" in event:
                events.append(event)
            at = line.find("{", end)
    return events


def wait_for(check: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.1) -> None:
    """Poll `check` until it returns True, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, httpx.HTTPError):
            if check():
                return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


@dataclass
class Process:
    """A child process whose output goes to a log file."""

    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> "Process":
        """Start the process (in its own process group)."""
        with self.log.open("ab") as handle:
            self.popen = subprocess.Popen(self.args, env=self.env, stdout=handle, stderr=handle,
                                          start_new_session=True, cwd=self.log.parent)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Stop the process group, killing it if it lingers."""
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def output(self) -> str:
        """Return what the process has logged so far."""
        return self.log.read_text(errors="replace")


ROOT = Path(__file__).resolve().parents[1]
# Segments a Piper worker holds at once: a thread per core (narrator worker), so a killed one
# costs at most this many runs again.
PIPER_IN_FLIGHT = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
    else os.cpu_count() or 1


def gpu_double_env(seconds_per_frame: float = 0.01) -> dict[str, str]:
    """Settings that run a worker's vLLM-Omni engine over the CPU double (tests/doubles)."""
    return {"NARRATOR_ENGINE": "vllm-omni",
            "NARRATOR_MODEL": str(ROOT / "tests" / "data" / "qwen3-tts-0.6b-customvoice"),
            "PYTHONPATH": f"{ROOT / 'tests' / 'doubles' / 'site'}:{ROOT}",
            "NARRATOR_TEST_OMNI_SECONDS_PER_FRAME": str(seconds_per_frame)}


def narrator(*args: str) -> list[str]:
    """Return the argv that runs the `narrator` command of this interpreter."""
    return [sys.executable, "-P", "-m", "narrator", *args]


@dataclass
class Stack:
    """An API and a worker process sharing one configuration."""

    url: str
    env: dict[str, str]
    api: Process
    worker: Process
    media: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def client(self, **kwargs: Any) -> httpx.Client:
        """Return an HTTP client for the API."""
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    def stop(self) -> None:
        """Stop both processes."""
        self.api.stop()
        self.worker.stop()


def start_stack(tmp: Path, env: dict[str, str], *, worker: bool = True,
                worker_args: tuple[str, ...] = ()) -> Stack:
    """Start `narrator api` and `narrator worker` with `env`, and wait until both are ready."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {"NARRATOR_PUBLIC_API_URL": f"http://127.0.0.1:{port}"} | env
    api = Process(narrator("api", "--port", str(port)), env, tmp / "api.log").start()
    work = Process(narrator("worker", *worker_args), env, tmp / "worker.log")
    if worker:
        work.start()
    url = f"http://127.0.0.1:{port}"
    stack = Stack(url, env, api, work)
    try:
        wait_for(lambda: httpx.get(f"{url}/healthz").status_code == 200, 30, "the API")
        if worker:
            wait_for(lambda: "engine.ready" in work.output(), 60, "the worker's engine")
    except TimeoutError:
        stack.stop()
        raise AssertionError(f"stack failed to start\nAPI:\n{api.output()[-3000:]}\n"
                             f"worker:\n{work.output()[-3000:]}") from None
    return stack


def audio_stats(data: bytes, fmt: str, rate: int | None = None) -> tuple[float, float]:
    """Decode audio bytes and return (duration in seconds, RMS)."""
    if fmt == "pcm":
        assert rate is not None
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        return len(samples) / rate, float(np.sqrt(np.mean(samples**2)))
    from core.audio import decode

    audio, sample_rate = decode(data)
    return len(audio) / sample_rate, float(np.sqrt(np.mean(audio**2)))


@contextmanager
def registered(checkpoint: Path, worker: str, registry_url: str) -> Iterator[str]:
    """Show the API a GPU worker serving `checkpoint` (the GPU is elsewhere); yield its
    model id."""
    from core.catalog import qwen3_model
    from core.registry import RedisRegistry, WorkerRecord

    registry = RedisRegistry(registry_url)
    record = WorkerRecord(worker, "ready", ("batch",), (qwen3_model(str(checkpoint)),),
                          time.time())
    registry.publish(record)
    time.sleep(2.1)  # the API caches the registry for two seconds
    try:
        yield record.models[0].id
    finally:
        registry.remove(record.id)


def consent_for(http: httpx.Client, name: str = "Narrator Nell",
                text: str | None = None) -> httpx.Response:
    """Record a voice consent: Piper's joe reads `text` (the consent statement by default),
    as a speaker would into a microphone, and the recording is posted."""
    from core.consent import STATEMENT

    spoken = http.post("/v1/audio/speech", json={
        "model": "piper", "voice": "joe", "input": text or STATEMENT, "response_format": "wav"})
    spoken.raise_for_status()
    return http.post("/v1/audio/voice_consents", data={"name": name, "language": "en-US"},
                     files={"recording": ("consent.wav", spoken.content, "audio/wav")})


TOMATO = "He put the tomato on the table."  # the lexicon tests say "tomato" as "banana"


def fruit_heard(audio: bytes) -> set[str]:
    """Which of 'tomato' and 'banana' the recogniser hears in TOMATO's audio, free to hear
    either at that place (its language model holds both sentences)."""
    from core.audio import decode
    from workers.aligners.sphinx import SphinxAligner

    samples, rate = decode(audio)
    heard = SphinxAligner().transcribe(np.asarray(samples, dtype=np.float32), rate,
                                       f"{TOMATO} {TOMATO.replace('tomato', 'banana')}")
    assert heard is not None
    return {"tomato", "banana"} & {w.word for w in heard}


def wait_job(client: httpx.Client, job_id: str, timeout: float = 120,
             until: tuple[str, ...] = ("completed", "failed", "cancelled")) -> dict[str, Any]:
    """Poll a job until its status is one of `until`; return the job object."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/v1/audio/jobs/{job_id}").json()
        if job.get("status") in until:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job did not reach {until}: {job}")
        time.sleep(0.1)


def wait_segments(client: httpx.Client, job_id: str, at_least: int, timeout: float = 90,
                  what: str = "progress") -> int:
    """Poll a job until at least `at_least` segments are done; return how many are."""
    deadline = time.monotonic() + timeout
    while True:
        done = int(client.get(f"/v1/audio/jobs/{job_id}").json()["segments"]["done"])
        if done >= at_least:
            return done
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what}: {done} of {at_least} segments after {timeout} s")
        time.sleep(0.05)


@contextmanager
def embedded(folder: Path, settings: dict[str, str] | None = None
             ) -> Iterator[tuple[str, Process]]:
    """Run `narrator serve` with only embedded defaults under `folder` (and `settings`);
    yield its URL and process once /readyz answers and every worker it starts has
    registered its model."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NARRATOR_", "PROMETHEUS_"))}
    env |= {"NARRATOR_DATA_DIR": str(folder / "data"), "NARRATOR_LOG_JSON": "1"}
    env |= settings or {}
    kokoro = kokoro_installed() and env.get("NARRATOR_SERVE_KOKORO", "true") != "false"
    port = free_port()
    process = Process(narrator("serve", "--port", str(port)), env, folder / "serve.log").start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 60, "narrator serve")
        if kokoro:
            wait_for(lambda: httpx.get(f"{url}/v1/models/kokoro").status_code == 200, 60,
                     "narrator serve's Kokoro worker")
        yield url, process
    finally:
        process.stop()


def insert_job(db: Any, texts: list[str], fmt: str = "wav",
               options: dict[str, Any] | None = None) -> Any:
    """Insert a queued job of `texts` (one chapter each) as the API stores it; return its id."""
    import json

    from sqlalchemy import text

    from models.base import uuid7

    job_id = uuid7()  # time-ordered like the API's: lists stay newest first
    chapters = [{"title": f"Chapter {n + 1}", "input": t} for n, t in enumerate(texts)]
    with db.begin() as connection:
        connection.execute(text(
            "INSERT INTO jobs (id, owner, status, model, voice, response_format, speed, options,"
            " chapters, metadata, input_characters, segments_total, segments_done,"
            " segments_failed, audio_seconds, created_at, updated_at, chars_done) VALUES"
            " (:id, '', 'queued', 'piper', 'joe', :fmt, 1.0, :options,"
            " :chapters, '{}', 100, 0, 0, 0, 0, now(), now(), 0)"),
            {"id": job_id, "fmt": fmt, "options": json.dumps(options or {}),
             "chapters": json.dumps(chapters)})
    return job_id
