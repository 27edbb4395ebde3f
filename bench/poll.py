"""`GET /v1/audio/jobs/{id}` throughput and latency on Postgres + Redis, against concurrency.

`narrator api` runs alone on a fresh database holding --jobs submitted jobs; bench.loadgen,
in its own process, polls them in turn from 1..64 keep-alive clients for --seconds each.
Target at 64 clients: >= 3,000 requests/s.

    python -m bench.poll [--concurrency 1,8,16,64] [--seconds 8] [--api-workers 1]
"""

import argparse
from typing import Any

import httpx

from bench.common import (
    Platform,
    cpu_seconds,
    load,
    platform_on_services,
    profiler,
    save,
    table,
)
from bench.submit import BODY, RssSampler, api_pids


def sweep(platform: Platform, concurrency: list[int], seconds: float,
          jobs: int = 200) -> list[dict[str, Any]]:
    """Create `jobs` jobs, then poll them at each concurrency for `seconds`."""
    with httpx.Client(base_url=platform.url) as http:
        created = [http.post("/v1/audio/jobs", content=BODY,
                             headers={"Content-Type": "application/json"}).json()["id"]
                   for _ in range(jobs)]
    paths = [f"/v1/audio/jobs/{job_id}" for job_id in created]
    load(platform.url, "GET", paths, 8, 1000, 10)  # warm-up
    pids = api_pids(platform)
    results = []
    for clients in concurrency:
        cpu = cpu_seconds(pids)
        result = load(platform.url, "GET", paths, clients, 10**9, seconds)
        cpu = cpu_seconds(pids) - cpu
        ok = result["statuses"].get("200", 0)
        results.append(result | {"concurrency": clients, "ok_per_s": ok / result["wall_s"],
                                 "api_cpu_ms_per_request": 1000 * cpu / max(ok, 1),
                                 "api_cpu_share": cpu / result["wall_s"]})
    return results


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,16,64")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--api-workers", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="run the API under py-spy; write bench/results/poll.profile.txt")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    with platform_on_services(worker=False, api_args=("--workers", str(args.api_workers)),
                              api_wrapper=profiler("poll") if args.profile else ()
                              ) as platform, RssSampler(api_pids(platform)) as rss:
        results = sweep(platform, levels, args.seconds)
    rows = [[r["concurrency"], f"{r['ok_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
             f"{r['api_cpu_ms_per_request']:.2f}", f"{100 * r['api_cpu_share']:.0f}%",
             r["errors"] + sum(v for k, v in r["statuses"].items() if k != "200")]
            for r in results]
    print(f"GET /v1/audio/jobs/{{id}}, narrator api --workers {args.api_workers}, "
          f"{args.seconds:.0f} s per level")
    print(table(["clients", "requests/s", "p50 ms", "p99 ms", "API CPU ms/req", "API CPU",
                 "failed"], rows))
    top = results[-1]
    print(f"\nat {top['concurrency']} clients: {top['ok_per_s']:.0f} requests/s "
          f"(target >= 3,000); API RSS max {max(rss.samples):.0f} MiB")
    save(f"poll_w{args.api_workers}", {"api_workers": args.api_workers, "levels": results,
                                       "api_rss_max_mib": max(rss.samples),
                                       "target": {"requests_per_s": 3000}})


if __name__ == "__main__":
    main()
