"""Prometheus metrics shared by the API and the workers (prometheus-client).

Counters and histograms live in the process that observes them. With PROMETHEUS_MULTIPROC_DIR
set (`narrator serve` sets it, and so does `narrator api --workers N`), every process on the
host writes its values there and the API's `/metrics` adds them all up, workers included.
A worker on another host serves its own with NARRATOR_METRICS_PORT. Job counts by status and
queue depths are read at scrape time (`api.routes.metrics`), not kept in memory.
"""

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.registry import REGISTRY

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

http_requests = Counter("narrator_http_requests", "HTTP requests answered",
                        ["method", "route", "status"])
http_latency = Histogram("narrator_http_request_duration_seconds",
                         "Time to answer an HTTP request (to the end of its body)",
                         ["method", "route"], buckets=LATENCY_BUCKETS)
first_chunk = Histogram("narrator_speech_first_chunk_seconds",
                        "POST /v1/audio/speech: time from the request to the first audio",
                        ["model", "streamed"], buckets=LATENCY_BUCKETS)
live_sentences = Counter("narrator_live_sentences",
                         "Sentences of WebSocket sessions (WS /v1/audio/speech/stream) sent to "
                         "a worker", ["model"])
segments = Counter("narrator_segments_synthesized", "Job segments synthesised",
                   ["model"])
audio_seconds = Counter("narrator_audio_seconds_produced",
                        "Seconds of audio synthesised (job segments and sync requests)",
                        ["model", "kind"])
engine_rtf = Histogram("narrator_engine_real_time_factor",
                       "Engine seconds per second of audio, per synthesis call",
                       ["model"], buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5,
                                           2, 5))
segment_failures = Counter("narrator_segment_failures",
                           "Segment attempts that raised (the segment is retried, or its job "
                           "fails once its attempts are spent)", ["model"])
segment_retakes = Counter("narrator_segment_retakes",
                          "Segments synthesised again by the quality guard, by the reason the "
                          "take before failed", ["model", "reason"])
reaper_actions = Counter("narrator_reaper_actions",
                         "What the reaper found and handed on (segments of dead workers "
                         "re-enqueued, jobs failed, plans and assemblies restarted)", ["sweep"])
busy_fraction = Gauge("narrator_worker_busy_fraction",
                      "Share of the last interval in which the worker ran at least one task",
                      ["worker"], multiprocess_mode="liveall")


def zero(models: list[str], sweeps: list[str]) -> None:
    """Export the failure counters at 0 from a worker's start, so that dashboards and alerts
    see a series (and `rate()` a first point) before anything has failed."""
    for model in models:
        segment_failures.labels(model)
        for reason in ("runaway", "truncated"):  # workers.jobs.quality
            segment_retakes.labels(model, reason)
    for sweep in sweeps:
        reaper_actions.labels(sweep)


def observe_synthesis(model: str, engine_seconds: float, audio: float, kind: str) -> None:
    """Count one engine call: its audio and its real-time factor."""
    audio_seconds.labels(model, kind).inc(audio)
    if audio > 0:
        engine_rtf.labels(model).observe(engine_seconds / audio)


def multiprocess_dir() -> str | None:
    """Return the folder processes share their values through, if one is set."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition() -> bytes:
    """Render this host's metrics: every process's with a shared folder, else this one's."""
    folder = multiprocess_dir()
    if folder is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def serve(port: int) -> None:
    """Serve `exposition()` on `port` from a daemon thread (a worker's own /metrics)."""
    from prometheus_client import start_http_server

    registry = REGISTRY
    if multiprocess_dir() is not None:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, registry=registry)


def process_exited(pid: int) -> None:
    """Drop a finished process's live gauges from the shared folder."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class BusyMeter:
    """Time in which at least one task runs, published as a fraction every `interval` s."""

    def __init__(self, worker: str, interval: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = time.monotonic()
        self._busy = 0.0
        self._window = self._since
        self._gauge = busy_fraction.labels(worker)
        self._interval = interval
        self._stop = threading.Event()

    def begin(self) -> None:
        """A task starts."""
        with self._lock:
            self._settle()
            self._active += 1

    def end(self) -> None:
        """A task ends."""
        with self._lock:
            self._settle()
            self._active = max(self._active - 1, 0)

    @contextmanager
    def task(self) -> Iterator[None]:
        """Count the enclosed block as busy time."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def _settle(self) -> None:
        now = time.monotonic()
        if self._active:
            self._busy += now - self._since
        self._since = now

    def publish(self) -> float:
        """Set the gauge to the busy share since the last call; return it."""
        with self._lock:
            self._settle()
            busy, self._busy = self._busy, 0.0
            window, self._window = self._since - self._window, self._since
        fraction = min(busy / window, 1.0) if window > 0 else 0.0
        self._gauge.set(fraction)
        return fraction

    def start(self) -> None:
        """Publish every interval in a daemon thread."""
        def loop() -> None:
            while not self._stop.wait(self._interval):
                self.publish()

        threading.Thread(target=loop, name="busy-meter", daemon=True).start()

    def stop(self) -> None:
        """Stop publishing."""
        self._stop.set()
