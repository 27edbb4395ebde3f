"""`POST /v1/audio/jobs/batch` admission on Postgres + Redis, and reads beside it.

`narrator api` runs alone on a fresh database (no worker: jobs stay queued, as when the
workers are on other machines). One HTTP client posts batches of --size one-sentence jobs,
one after another, and times each from request to answer (validation, the INSERTs, the
broker messages, the ids back). While one batch is being admitted, bench.loadgen (its own
process) reads jobs with --readers keep-alive clients, and for as long with no batch running,
as the baseline. Targets: >= 5,000 jobs/s admitted;
GET p99 < 20 ms at 64 clients during a 10,000-job batch.

    python -m bench.batch [--size 10000] [--batches 3] [--readers 64] [--api-workers 1]
"""

import argparse
import threading
import time
from typing import Any

import httpx

from bench.common import load, platform_on_services, save, table

JOB = {"input": "A short job for the batch benchmark.", "response_format": "wav"}


def admit(client: httpx.Client, size: int) -> tuple[float, list[str]]:
    """Post one batch of `size` jobs; return its seconds and ids."""
    start = time.perf_counter()
    answer = client.post("/v1/audio/jobs/batch", json=[JOB] * size)
    answer.raise_for_status()
    return time.perf_counter() - start, answer.json()["ids"]


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--readers", type=int, default=64)
    parser.add_argument("--api-workers", type=int, default=1)
    args = parser.parse_args()
    with platform_on_services(worker=False, api_args=("--workers", str(args.api_workers))
                              ) as platform, httpx.Client(base_url=platform.url,
                                                          timeout=300) as client:
        _, warm = admit(client, 100)  # warm-up: imports, connections, the catalogue
        seconds = [admit(client, args.size)[0] for _ in range(args.batches)]
        paths = [f"/v1/audio/jobs/{job_id}" for job_id in warm]
        load(platform.url, "GET", paths, args.readers, 2000, 3)  # the readers' warm-up
        alone = load(platform.url, "GET", paths, args.readers, 10**9, 6)  # no batch running
        reads: dict[str, Any] = {}
        during: list[float] = []

        def read() -> None:
            reads.update(load(platform.url, "GET", paths, args.readers, 10**9, 6))

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.0)  # the readers are connected and running
        while reader.is_alive():
            during.append(admit(client, args.size)[0])
        reader.join()
    rates = [args.size / s for s in seconds]
    rows = [[n + 1, args.size, f"{s:.2f}", f"{args.size / s:.0f}"] for n, s in enumerate(seconds)]
    print(f"POST /v1/audio/jobs/batch, narrator api --workers {args.api_workers}, "
          f"{args.size} jobs a batch")
    print(table(["batch", "jobs", "seconds", "jobs/s"], rows))
    print(f"\nadmitted: {max(rates):.0f} jobs/s best, {sorted(rates)[len(rates) // 2]:.0f} "
          "median (target >= 5,000)")
    print(f"GET /v1/audio/jobs/{{id}} at {args.readers} clients while batches were admitted "
          f"({len(during)} batches, {args.size / max(sum(during) / max(len(during), 1), 1e-9):.0f}"
          f" jobs/s then): p50 {reads.get('p50_ms', 0):.1f} ms, p99 {reads.get('p99_ms', 0):.1f}"
          f" ms (target < 20), {reads.get('rps', 0):.0f} reads/s; with no batch running: p50 "
          f"{alone['p50_ms']:.1f} ms, p99 {alone['p99_ms']:.1f} ms, {alone['rps']:.0f} reads/s")
    if alone["rps"]:  # Little's law: a closed loop of N clients at R/s waits N / R on average
        print(f"{args.readers} clients in a closed loop at {alone['rps']:.0f} reads/s wait "
              f"{1000 * args.readers / alone['rps']:.1f} ms on average with no batch running "
              f"(Little's law): a p99 under 20 ms needs more than {args.readers / 0.020:,.0f}"
              " reads/s from this API")
    save(f"batch_w{args.api_workers}", {"size": args.size, "seconds": seconds,
                                        "jobs_per_s": rates, "reads_during": reads,
                                        "reads_alone": alone, "batches_during": during,
                                        "target": {"jobs_per_s": 5000, "get_p99_ms": 20}})


if __name__ == "__main__":
    main()
