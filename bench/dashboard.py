"""Narrator's Grafana dashboard drawn from a live run, without Grafana (not packaged in Debian
or npm): `narrator serve` under mixed load, `/metrics` scraped every SCRAPE s, each panel of
deploy/grafana/narrator.json computed from the scrapes as its PromQL does (rates over a
window, histogram quantiles by linear interpolation in the buckets), drawn with matplotlib.

    python -m bench.dashboard [--seconds 150] [--out bench/results/dashboard.png]

The load: a streamed sync request every 2 s, a whole one every 3 s, a short job every 15 s,
and one request with an unknown voice every 10 s (4xx in the status panel).
"""

import argparse
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common import RESULTS, served

Labels = tuple[tuple[str, str], ...]
Scrape = tuple[float, dict[tuple[str, Labels], float]]
SCRAPE = 2.0
WINDOW = 20.0  # the rate window, in s (the dashboard's 1m/5m, shortened for a short run)


def scrape(http: httpx.Client) -> Scrape:
    """Return (time, {(sample name, labels): value}) from one /metrics."""
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return time.time(), samples


def series(scrapes: list[Scrape], name: str, by: str) -> dict[str, list[tuple[float, float]]]:
    """A gauge's value over time, summed by one label (0 where a scrape lacks the key: an
    empty queue is not listed)."""
    sums: list[tuple[float, dict[str, float]]] = []
    for t, samples in scrapes:
        summed: dict[str, float] = defaultdict(float)
        for (sample, labels), value in samples.items():
            if sample == name:
                summed[dict(labels).get(by, "")] += value
        sums.append((t, summed))
    keys = {key for _, summed in sums for key in summed}
    return {key: [(t, summed.get(key, 0.0)) for t, summed in sums] for key in keys}


def rates(scrapes: list[Scrape], name: str, by: str,
          keep: Callable[[dict[str, str]], bool] = lambda _: True
          ) -> dict[str, list[tuple[float, float]]]:
    """A counter's per-second rate over WINDOW, summed by one label."""
    totals = series([(t, {k: v for k, v in s.items() if keep(dict(k[1]))})
                     for t, s in scrapes], name, by)
    out: dict[str, list[tuple[float, float]]] = {}
    for key, points in totals.items():
        out[key] = []
        for t, value in points:
            earlier = [(t0, v0) for t0, v0 in points if t - WINDOW <= t0 < t]
            if earlier:
                t0, v0 = earlier[0]
                out[key].append((t, max(0.0, value - v0) / (t - t0)))
    return out


def quantiles(scrapes: list[Scrape], name: str, by: str, q: float
              ) -> dict[str, list[tuple[float, float]]]:
    """histogram_quantile(q, sum by (le, BY) (rate(NAME_bucket[WINDOW])))."""
    buckets: dict[str, dict[float, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list))
    for t, samples in scrapes:
        summed: dict[tuple[str, float], float] = defaultdict(float)
        for (sample, labels), value in samples.items():
            if sample == name + "_bucket":
                d = dict(labels)
                summed[(d.get(by, ""), float(d["le"]))] += value
        for (key, le), value in summed.items():
            buckets[key][le].append((t, value))
    out: dict[str, list[tuple[float, float]]] = {}
    for key, by_le in buckets.items():
        edges = sorted(by_le)
        times = [t for t, _ in by_le[edges[0]]]
        out[key] = []
        for i, t in enumerate(times):
            j = next((k for k in range(i) if times[k] >= t - WINDOW), i)
            if j == i:
                continue
            counts = [by_le[le][i][1] - by_le[le][j][1] for le in edges]
            total = counts[-1]
            if total <= 0:
                continue
            rank, lower, below = q * total, 0.0, 0.0
            for le, count in zip(edges, counts, strict=True):
                if count >= rank:
                    upper = le if le != float("inf") else lower
                    share = (rank - below) / (count - below) if count > below else 0.0
                    out[key].append((t, lower + (upper - lower) * share))
                    break
                lower, below = le, count
    return out


def load(url: str, stop: threading.Event) -> None:
    """Mixed traffic until `stop`: streamed and whole sync speech, jobs, a bad request."""
    def every(period: float, call: Callable[[httpx.Client], Any]) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            while not stop.is_set():
                call(http)
                stop.wait(period)

    def streamed(http: httpx.Client) -> None:
        with http.stream("POST", "/v1/audio/speech", json={
                "input": "A streamed answer, spoken as it is made.", "response_format": "pcm",
                "stream_format": "audio"}) as response:
            for _ in response.iter_bytes():
                pass

    calls: list[tuple[float, Callable[[httpx.Client], Any]]] = [
        (2.0, streamed),
        (3.0, lambda h: h.post("/v1/audio/speech", json={"input": "A whole answer, at once.",
                                                          "response_format": "wav"})),
        (15.0, lambda h: h.post("/v1/audio/jobs", json={
            "input": "A short job of two sentences. It is spoken in the background.",
            "subtitles": ["srt"]})),
        (10.0, lambda h: h.post("/v1/audio/speech", json={"input": "x", "voice": "nope"})),
    ]
    threads = [threading.Thread(target=every, args=call, daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def draw(scrapes: list[Scrape], out: Path) -> None:
    """Draw the dashboard's panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = scrapes[0][0]
    panels: list[tuple[str, dict[str, list[tuple[float, float]]]]] = [
        ("Queue depth", series(scrapes, "narrator_queue_depth", "queue")),
        ("Jobs by status", series(scrapes, "narrator_jobs", "status")),
        ("Audio-seconds per second", rates(scrapes, "narrator_audio_seconds_produced_total",
                                           "kind")),
        ("Engine real-time factor, p50", quantiles(
            scrapes, "narrator_engine_real_time_factor", "model", 0.5)),
        ("Time to first audio p50 / p99 (s)", {
            f"p{int(q * 100)} streamed={k}": v for q in (0.5, 0.99)
            for k, v in quantiles(scrapes, "narrator_speech_first_chunk_seconds", "streamed",
                                  q).items()}),
        ("Segment retakes, failures and the reaper", {
            **{f"retake: {k}": v for k, v in rates(
                scrapes, "narrator_segment_retakes_total", "reason").items()},
            **{f"failed: {k}": v for k, v in rates(
                scrapes, "narrator_segment_failures_total", "model").items()},
            **{f"reaper: {k}": v for k, v in rates(
                scrapes, "narrator_reaper_actions_total", "sweep").items() if k.startswith(
                    "segments")}}),
        ("Worker busy fraction", series(scrapes, "narrator_worker_busy_fraction", "worker")),
        ("Workers by state", series(scrapes, "narrator_workers", "state")),
        ("API latency by route, p99 (s)", quantiles(
            scrapes, "narrator_http_request_duration_seconds", "route", 0.99)),
        ("API requests by status (per s)", rates(scrapes, "narrator_http_requests_total",
                                                 "status")),
    ]
    fig, axes = plt.subplots(5, 2, figsize=(14, 16))
    for ax, (title, lines) in zip(axes.flat, panels, strict=True):
        for label, points in sorted(lines.items()):
            if points:
                ax.plot([t - start for t, _ in points], [v for _, v in points],
                        label=label[-40:] or "all")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("s", fontsize=8)
        ax.tick_params(labelsize=8)
        if lines:
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("Narrator (deploy/grafana/narrator.json) from a live `narrator serve` run, "
                 f"/metrics every {SCRAPE:.0f} s, rates over {WINDOW:.0f} s", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> None:
    """Run the load, scrape, draw."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--out", type=Path, default=RESULTS / "dashboard.png")
    args = parser.parse_args()
    with served() as url, httpx.Client(base_url=url, timeout=30) as http:
        stop = threading.Event()
        traffic = threading.Thread(target=load, args=(url, stop), daemon=True)
        traffic.start()
        scrapes: list[Scrape] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            scrapes.append(scrape(http))
            time.sleep(SCRAPE)
        stop.set()
    draw(scrapes, args.out)
    print(f"{len(scrapes)} scrapes over {args.seconds:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
