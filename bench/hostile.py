"""How long adversarial text holds the API's event loop: /healthz beside hostile requests.

Starts `narrator migrate` and `narrator api` in embedded mode with their defaults (no worker:
the API's event loop is what is measured, and nothing here needs audio), except
SYNC_TIMEOUT_SECONDS=2, so that a sync request, with no worker to answer it, ends in a 503
after 2 s instead of 120. A prober thread asks GET /healthz every 5 ms on a connection of its
own; for each hostile request (2,000,000-character job bodies through the preview and the
submit, 4,096-character sync requests) the table gives the request's answer and time, and
the /healthz latencies measured while it ran: a latency is how long the loop could not
answer. The issue's bound: never more than 50 ms.

    python -m bench.hostile [--repeat 2]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port, save, table

JOB, SYNC = 2_000_000, 4096


def _fill(unit: str, size: int, tail: str = "") -> str:
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


SHAPES: dict[str, Callable[[int], str]] = {
    "prose": lambda n: _fill("The quick brown fox jumps over the lazy dog. ", n),
    "voice mark left open": lambda n: "Hi [voice:" + " " * (n - 12) + "x",
    "combining marks": lambda n: "a" + "\u0301" * (n // 2 - 1) + "\u0316" * (n // 2),
    "pause marks": lambda n: _fill("Hi.[pause:30s]", n),
    "blank lines": lambda n: "Hi." + "\n" + " " * (n - 6) + "x.",
    "voice marks": lambda n: _fill("[voice:a] Hi. ", n),
    "digits": lambda n: _fill("11-", n, "x"),
}


class Prober(threading.Thread):
    """GET /healthz every 5 ms; keeps (sent at, seconds)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stopped = url, threading.Event()
        self.samples: list[tuple[float, float]] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stopped.is_set():
                sent = time.monotonic()
                http.get("/healthz")
                self.samples.append((sent, time.monotonic() - sent))
                time.sleep(0.005)

    def within(self, start: float, end: float) -> list[float]:
        """Return the latencies of probes sent in [start, end] (and the one in flight)."""
        return [s for at, s in self.samples if start <= at <= end]


def case(http: httpx.Client, prober: Prober, name: str, route: str, body: dict[str, Any]
         ) -> list[Any]:
    """Send one hostile request; return its table row."""
    started = time.monotonic()
    response = http.post(route, json=body)
    ended = time.monotonic()
    time.sleep(0.05)  # the probe that was waiting on the loop comes back
    latencies = prober.within(started, ended) or [0.0]
    chars = len(body.get("input") or "") or sum(len(c["input"]) for c in body["chapters"])
    return [name, route, chars, response.status_code, round(ended - started, 3),
            round(statistics.median(latencies) * 1000, 1),
            round(max(latencies) * 1000, 1), len(latencies)]


def main() -> None:
    """Run every shape through the preview, the submit and sync speech; print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="narrator-hostile-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
            "NARRATOR_DATA_DIR": tmp, "NARRATOR_SYNC_TIMEOUT_SECONDS": "2"}
        subprocess.run([sys.executable, "-P", "-m", "narrator", "migrate"], env=env, check=True,
                       capture_output=True)
        port = free_port()
        log = (Path(tmp) / "api.log").open("wb")
        api = subprocess.Popen([sys.executable, "-P", "-m", "narrator", "api", "--port",
                                str(port)], env=env, stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            rows = run(url, args.repeat)
        finally:
            api.terminate()
            api.wait(30)
    headers = ["input", "route", "characters", "status", "request s", "/healthz p50 ms",
               "/healthz max ms", "probes"]
    print(table(headers, rows))
    worst = max(r[6] for r in rows)
    print(f"worst /healthz latency beside a hostile request: {worst} ms (bound: 50 ms)")
    save("hostile", {"rows": [dict(zip(headers, r, strict=True)) for r in rows],
                     "worst_ms": worst})


def run(url: str, repeat: int) -> list[list[Any]]:
    """Every shape, `repeat` times, through each route; plus an idle window."""
    prober = Prober(url)
    prober.start()
    rows: list[list[Any]] = []
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            time.sleep(1.0)
            idle = prober.within(time.monotonic() - 1.0, time.monotonic()) or [0.0]
            rows.append(["(idle, 1 s)", "", 0, "", 1.0, round(statistics.median(idle) * 1000, 1),
                         round(max(idle) * 1000, 1), len(idle)])
            for name, make in SHAPES.items():
                for _ in range(repeat):
                    rows.append(case(http, prober, name, "/v1/audio/jobs/preview",
                                     {"input": make(JOB)}))
                rows.append(case(http, prober, name, "/v1/audio/jobs", {"input": make(JOB)}))
                for _ in range(repeat):
                    rows.append(case(http, prober, name, "/v1/audio/speech",
                                     {"input": make(SYNC), "response_format": "wav"}))
            chapters = [{"title": f"Chapter {n}", "input": SHAPES["prose"](2000)}
                        for n in range(1000)]
            rows.append(case(http, prober, "1,000 chapters", "/v1/audio/jobs/preview",
                             {"chapters": chapters}))
    finally:
        prober.stopped.set()
        prober.join(5)
    return rows


if __name__ == "__main__":
    main()
