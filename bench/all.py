"""Run every benchmark of the performance targets, then write a summary and plots.

Each benchmark runs as its own `python -m bench.<name>` process, one after the other (they
share this machine's cores), and leaves its JSON under bench/results/. Then this writes
bench/results/SUMMARY.md (the targets table with the measured values) and the plots
bench/results/throughput.png (requests per second against concurrent clients) and
bench/results/soak_1000.png (memory over time, drawn by bench.soak).

    python -m bench.all [--quick] [--only submit,poll] [--summary-only]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import plots
from bench.common import RESULTS, table

FORMATS = ["wav", "mp3", "m4b"]  # bench.longform's rows, one aligned job each

# name, arguments, quick arguments
REDIS_BROKER = ["--broker-url", "redis://127.0.0.1:6379/7"]
RUNS: list[tuple[str, list[str], list[str]]] = [
    ("sync_overhead", [], ["--rounds", "8"]),
    ("sync_overhead", REDIS_BROKER, [*REDIS_BROKER, "--rounds", "8"]),
    ("longform", ["--formats", *FORMATS],
     ["--formats", *FORMATS, "--chars", "6000", "--plan-chars", "200000",
      "--assembly-hours", "0.25"]),
    ("assembly", ["--hours", "2"], ["--hours", "0.25"]),
    ("submit", [], ["--seconds", "3"]),
    ("submit", ["--api-workers", "2"], ["--api-workers", "2", "--seconds", "3"]),
    ("batch", [], ["--size", "2000", "--batches", "2"]),
    ("poll", [], ["--seconds", "3"]),
    ("poll", ["--api-workers", "2"], ["--api-workers", "2", "--seconds", "3"]),
    ("api_rss", [], ["--seconds", "5"]),
    ("soak", ["--jobs", "1000"], ["--jobs", "300"]),
]


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _level(result: dict[str, Any] | None, clients: int, key: str) -> dict[str, Any] | None:
    if result is None:
        return None
    return next((lv for lv in result["levels"] if lv["concurrency"] == clients), None)


def summary() -> str:
    """Render the targets table from the results on disk."""
    rows: list[list[Any]] = []

    def row(measure: str, value: str, target: str, met: bool | None, command: str) -> None:
        rows.append([measure, value, target, {True: "yes", False: "no", None: "-"}[met],
                     f"`{command}`"])

    for name, mode, command in (
            ("sync_overhead", "embedded", "python -m bench.sync_overhead"),
            ("sync_overhead_redis", "Postgres + Redis",
             "python -m bench.sync_overhead --broker-url redis://127.0.0.1:6379/7")):
        sync = _load(name)
        row(f"sync `/v1/audio/speech` latency / bare Piper (nothing else running), {mode}",
            f"{sync['ratio']:.3f} (paired: {sync['ratio_paired']:.3f}; interleaved: "
            f"{sync['ratio_interleaved']:.3f})" if sync and "ratio_paired" in sync
            else f"{sync['ratio']:.3f} (interleaved: {sync['ratio_interleaved']:.3f})" if sync
            else "not run", "<= 1.05", sync["ratio"] <= 1.05 if sync else None, command)
    engines = _load("engines")
    for name, run in ((engines or {}).get("results") or {}).items():
        wer = run["wer"]
        row(f"{name} through `narrator serve`: sync ms per audio-s (bare engine); streamed "
            "first audio; job audio-s per s; recognition check WER (mean of voices)",
            f"{1000 * run['sync_s_per_audio_s']['median']:.0f} "
            f"({1000 * run['bare']['sync_session']:.0f}); "
            f"{1000 * run['first_audio_s']['median']:.0f} ms; {run['job']['rate']:.1f}; "
            f"{sum(wer.values()) / len(wer):.3f} of {len(wer)}", "reported", None,
            "python -m bench.engines")
    longform = _load("longform")
    for key in [*FORMATS, f"{FORMATS[-1]}, no alignment"]:
        if longform and key in longform:
            run = longform[key]
            label = f"{key.split(',')[0]} + srt, estimated cues" if "," in key \
                else f"{key} + srt, word times"
            tail = f"; {run['tail_s']:.1f} s" if "tail_s" in run else ""
            best = f" (÷ Piper at its best {run['ratio_best']:.3f})" if "ratio_best" in run \
                else ""
            row(f"book job ({label}): audio-s per wall-s / bare Piper; last segment -> "
                "completed", f"{run['ratio']:.3f}{best}{tail}", ">= 0.95",
                run["ratio"] >= 0.95, f"python -m bench.longform --formats {' '.join(FORMATS)}")
    assembly = _load("assembly")
    for run in (assembly or {}).get("results", []):
        row(f"{run['format']} assembly of a {run['hours']:g} h book: last segment -> done "
            "(fragments encoded ahead)", f"{run['tail_s']:.2f} s", "< 5 s",
            run["tail_s"] < 5 and run["exact"], "python -m bench.assembly --hours 2")
    for workers in (1, 2):
        submit = _load(f"submit_w{workers}")
        for clients in (64, 16):
            level = _level(submit, clients, "jobs_per_s")
            if level is None:
                continue
            wanted = (">= 1,000 jobs/s, p99 < 50 ms" if clients == 64 else "p99 < 50 ms")
            met = level["p99_ms"] < 50 and (clients == 16 or level["jobs_per_s"] >= 1000)
            row(f"`POST /v1/audio/jobs`, {clients} clients, {workers} API process(es)",
                f"{level['jobs_per_s']:.0f} jobs/s, p99 {level['p99_ms']:.0f} ms", wanted, met,
                f"python -m bench.submit --api-workers {workers}")
    batch = _load("batch_w1")
    if batch:
        rate = statistics.median(batch["jobs_per_s"])
        reads, alone = batch["reads_during"], batch.get("reads_alone", {})
        row(f"`POST /v1/audio/jobs/batch` of {batch['size']} jobs, 1 API process",
            f"{rate:.0f} jobs/s admitted (median of {len(batch['jobs_per_s'])})",
            ">= 5,000 jobs/s", rate >= 5000,
            "python -m bench.batch")
        row("`GET /v1/audio/jobs/{id}` p99, 64 clients, while batches are admitted",
            f"{reads.get('p99_ms', 0):.0f} ms (no batch: {alone.get('p99_ms', 0):.0f} ms)",
            "< 20 ms", reads.get("p99_ms", 1e9) < 20, "python -m bench.batch")
    for workers in (1, 2):
        poll = _level(_load(f"poll_w{workers}"), 64, "ok_per_s")
        if poll:
            row(f"`GET /v1/audio/jobs/{{id}}`, 64 clients, {workers} API process(es)",
                f"{poll['ok_per_s']:.0f} requests/s", ">= 3,000/s", poll["ok_per_s"] >= 3000,
                f"python -m bench.poll --api-workers {workers}")
    rss = _load("api_rss")
    row("API process RSS (idle, 64 clients submitting, 64 polling)",
        f"{rss['peak_mb']:.0f} MB" if rss else "not run", "< 150 MB",
        rss["peak_mb"] < 150 if rss else None, "python -m bench.api_rss")
    soak = _load("soak_1000")
    if soak:
        worker = soak["memory"]["worker"]
        row("worker RSS over 1,000 jobs (drift after warm-up)",
            f"{worker['drift_pct_after_warmup']:+.1f} % ({worker['first_mib']:.0f} -> "
            f"{worker['last_mib']:.0f} MiB), {soak['lost']} jobs lost", "flat (+-5 %)",
            abs(worker["drift_pct_after_warmup"]) <= 5 and soak["lost"] == 0,
            "python -m bench.soak --jobs 1000")
    return table(["measure", "measured", "target", "met", "command"], rows)


def draw() -> None:
    """Plot requests per second against concurrency for the API benchmarks."""
    series = {}
    for name, key, label in (("submit_w1", "jobs_per_s", "POST jobs, 1 process"),
                             ("submit_w2", "jobs_per_s", "POST jobs, 2 processes"),
                             ("poll_w1", "ok_per_s", "GET job, 1 process"),
                             ("poll_w2", "ok_per_s", "GET job, 2 processes")):
        result = _load(name)
        if result:
            series[label] = [(lv["concurrency"], lv[key]) for lv in result["levels"]]
    if series:
        plots.lines(RESULTS / "throughput.png", "API throughput on Postgres + Redis (2 cores)",
                    "concurrent clients", "requests per second", series)


def main() -> None:
    """Run the benchmarks, then the summary."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    only = {n for n in args.only.split(",") if n}
    if not args.summary_only:
        for name, full, quick in RUNS:
            if only and name not in only:
                continue
            argv = [sys.executable, "-m", f"bench.{name}", *(quick if args.quick else full)]
            print(f"\n$ python -m bench.{name} {' '.join(argv[3:])}", flush=True)
            started = time.monotonic()
            subprocess.run(argv, check=True)
            print(f"({time.monotonic() - started:.0f} s)", flush=True)
    draw()
    text = summary()
    (RESULTS / "SUMMARY.md").write_text(
        "# Benchmark summary\n\nWritten by `python -m bench.all` from bench/results/*.json "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).\n\n{text}\n\n"
        "![throughput](throughput.png)\n\n![soak](soak_1000.png)\n")
    print("\n" + text)


if __name__ == "__main__":
    main()
