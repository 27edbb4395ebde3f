"""`POST /v1/audio/jobs` throughput and latency on Postgres + Redis, against concurrency.

`narrator api` runs alone on a fresh database (no worker: jobs stay queued, as when the
workers are on other machines); bench.loadgen, in its own process, submits one-sentence
jobs from 1..64 keep-alive clients for --seconds each. Target at 64 clients: >= 1,000 jobs/s
with p99 < 50 ms. The API's resident memory is sampled throughout.

    python -m bench.submit [--concurrency 1,8,16,64] [--seconds 8] [--api-workers 1]
                           [--reuse-port]  # API-WORKERS processes on one SO_REUSEPORT port
"""

import argparse
import threading
from pathlib import Path
from typing import Any

import orjson

from bench.common import (
    Platform,
    cpu_seconds,
    load,
    platform_on_services,
    profiler,
    rss_mib,
    save,
    table,
)

BODY = orjson.dumps({"input": "A short job for the throughput benchmark.",
                     "response_format": "wav"})


class RssSampler:
    """Sample the RSS of a process tree's root every 0.5 s while in use."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.samples = pids, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.samples.append(sum(rss_mib(pid) for pid in self.pids))

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def api_pids(platform: Platform) -> list[int]:
    """The API processes: uvicorn's parent and its worker processes, or each process of
    `--reuse-port`."""
    if platform.more_apis:
        return [platform.api.pid, *(p.pid for p in platform.more_apis)]
    children = Path(f"/proc/{platform.api.pid}/task/{platform.api.pid}/children")
    extra = [int(p) for p in children.read_text().split()] if children.exists() else []
    return [platform.api.pid, *extra]


def sweep(platform: Platform, concurrency: list[int], seconds: float) -> list[dict[str, Any]]:
    """Submit at each concurrency for `seconds`; return one result per level."""
    load(platform.url, "POST", ["/v1/audio/jobs"], 8, 400, 10, BODY)  # warm-up
    results = []
    pids = api_pids(platform)
    serving = 1 if len(pids) > 1 and not platform.more_apis else 0  # not uvicorn's parent
    for clients in concurrency:
        each = [cpu_seconds([pid]) for pid in pids]
        result = load(platform.url, "POST", ["/v1/audio/jobs"], clients, 10**9, seconds, BODY)
        each = [cpu_seconds([pid]) - before for pid, before in zip(pids, each, strict=True)]
        cpu = sum(each)
        accepted = result["statuses"].get("202", 0)
        results.append(result | {"concurrency": clients, "jobs_per_s": accepted /
                                 result["wall_s"],
                                 "api_cpu_ms_per_request": 1000 * cpu / max(accepted, 1),
                                 "api_cpu_share": cpu / result["wall_s"],
                                 # how the work spread over the API's processes (the kernel
                                 # hands each keep-alive connection to one of them)
                                 "process_shares": [round(c / max(cpu, 1e-9), 2)
                                                    for c in each[serving:]]})
    return results


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,16,64")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--api-workers", type=int, default=1)
    parser.add_argument("--reuse-port", action="store_true",
                        help="API-WORKERS separate `narrator api --reuse-port` processes "
                             "instead of `narrator api --workers API-WORKERS`")
    parser.add_argument("--profile", action="store_true",
                        help="run the API under py-spy; write bench/results/submit.profile.txt")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    wrapper = profiler("submit") if args.profile else ()
    api_args = ("--reuse-port",) if args.reuse_port else ("--workers", str(args.api_workers))
    with platform_on_services(worker=False, api_args=api_args, api_wrapper=wrapper,
                              apis=args.api_workers if args.reuse_port else 1) as platform, \
            RssSampler(api_pids(platform)) as rss:
        results = sweep(platform, levels, args.seconds)
    rows = [[r["concurrency"], f"{r['jobs_per_s']:.0f}", f"{r['p50_ms']:.1f}",
             f"{r['p99_ms']:.1f}", f"{r['api_cpu_ms_per_request']:.2f}",
             f"{100 * r['api_cpu_share']:.0f}%",
             r["errors"] + sum(v for k, v in r["statuses"].items() if k != "202"),
             " / ".join(f"{share:.2f}" for share in r["process_shares"])]
            for r in results]
    how = (f"{args.api_workers} x narrator api --reuse-port" if args.reuse_port
           else f"narrator api --workers {args.api_workers}")
    print(f"POST /v1/audio/jobs, {how}, {args.seconds:.0f} s per level")
    print(table(["clients", "jobs/s", "p50 ms", "p99 ms", "API CPU ms/job", "API CPU",
                 "failed", "CPU share of each API process"], rows))
    top = results[-1]
    print(f"\nat {top['concurrency']} clients: {top['jobs_per_s']:.0f} jobs/s (target >= 1,000), "
          f"p99 {top['p99_ms']:.1f} ms (target < 50); API RSS max {max(rss.samples):.0f} MiB")
    save(f"submit_w{args.api_workers}{'_reuseport' if args.reuse_port else ''}",
         {"api_workers": args.api_workers, "reuse_port": args.reuse_port, "levels": results,
          "api_rss_max_mib": max(rss.samples), "target": {"jobs_per_s": 1000, "p99_ms": 50}})


if __name__ == "__main__":
    main()
