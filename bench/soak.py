"""Soak: many short jobs through `narrator api` and `narrator worker` on Postgres and Redis.

Submits --jobs one-sentence jobs from --clients threads (loopback only), keeping at most
--window of them in flight, until every one has ended, and samples the resident memory of
the API and the worker process every second. Reports jobs lost (not completed; must be 0),
throughput, and each process's memory slope after warm-up (the first --warmup fraction of
the run is left out): the least-squares slope over the rest, as % of the mean per 1,000
jobs, and that slope times the jobs of the steady part (the drift over the whole run after
warm-up). Target: within +-5 %. Draws bench/results/soak_<jobs>.png (memory and jobs against time).

Ctrl-C (or SIGTERM) stops submitting, waits for the jobs already submitted to end and
reports over those, marked "interrupted"; a second Ctrl-C aborts.

    python -m bench.soak [--jobs 10000] [--clients 8] [--window 64]
        [--env NARRATOR_WORKER_MAX_TASKS=1000]   # settings for both processes (repeatable)
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
        [--redis-url redis://127.0.0.1:6379/5]
"""

import argparse
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench import plots
from bench.common import PG_URL, RESULTS, platform_on_services, rss_mib, save, table

# A fixed set of sentences: inputs that grew with the job number ("... nine thousand nine
# hundred ...") made the engine's buffers grow with them, which looked like a leak.
TEXTS = ["The tide came in slowly over the flat grey sand.",
         "She counted the lanterns along the harbour wall twice.",
         "A cold wind pushed the gulls back towards the cliffs.",
         "The ferry was late again, and nobody seemed surprised.",
         "He kept the letter in his coat for three whole winters."]


def slope_percent(samples: list[tuple[float, float]], jobs_at: list[tuple[float, int]]) -> float:
    """Least-squares slope of memory against jobs ended, in % of the mean per 1,000 jobs."""
    done = [next((n for t, n in reversed(jobs_at) if t <= when), 0) for when, _ in samples]
    xs, ys = done, [mib for _, mib in samples]
    if len(set(xs)) < 2:
        return 0.0
    slope = statistics.linear_regression(xs, ys).slope
    return 100 * slope * 1000 / statistics.fmean(ys)


def main() -> None:
    """Run the soak and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--window", type=int, default=64, help="most jobs in flight")
    parser.add_argument("--warmup", type=float, default=0.2)
    parser.add_argument("--database-url", default=PG_URL)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the API and the worker; names the result file")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)

    from sqlalchemy import text

    from models.db import sql_engine_for

    samples: dict[str, list[tuple[float, float]]] = {"api": [], "worker": []}
    jobs_at: list[tuple[float, int]] = []
    stop, interrupted = threading.Event(), threading.Event()

    def interrupt(signum: int, _frame: object) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        print(f"signal {signum}: no more submits; draining the jobs in flight", flush=True)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    with platform_on_services(args.database_url, args.redis_url, extra_env=extra) as platform:
        url, database = platform.url, platform.database
        api, worker = platform.api.pid, platform.worker.pid if platform.worker else 0

        def sample() -> None:
            while not stop.wait(1.0):
                now = time.monotonic()
                samples["api"].append((now, rss_mib(api)))
                samples["worker"].append((now, rss_mib(worker)))

        threading.Thread(target=sample, daemon=True).start()
        start = time.monotonic()
        with httpx.Client(base_url=url, timeout=60) as http, \
                ThreadPoolExecutor(args.clients) as pool:
            # Closed loop: at most --window jobs in flight, so the platform runs in a steady
            # state (all 10,000 at once would plan everything before finishing anything).
            # Progress comes from the job table: one cheap query, not a GET per job.
            jobs = sql_engine_for(database)
            ended = text("SELECT count(*) FROM jobs WHERE status IN "
                         "('completed', 'failed', 'cancelled')")
            ids: list[str] = []
            with jobs.connect() as connection:
                while True:
                    done = int(connection.execute(ended).scalar_one())
                    connection.rollback()
                    jobs_at.append((time.monotonic(), done))
                    room = min(args.window - (len(ids) - done), args.jobs - len(ids))
                    if room > 0 and not interrupted.is_set():
                        ids += pool.map(lambda n: http.post("/v1/audio/jobs", json={
                            "input": TEXTS[n % len(TEXTS)], "response_format": "wav"}
                            ).raise_for_status().json()["id"], range(len(ids), len(ids) + room))
                    if (done >= len(ids) and (interrupted.is_set() or done >= args.jobs)) \
                            or time.monotonic() - start > 6 * 3600:
                        break
                    time.sleep(0.5)
            jobs.dispose()
            wall = time.monotonic() - start
            # The verdict comes from the API: every job, once.
            statuses = dict(zip(ids, pool.map(
                lambda job_id: http.get(f"/v1/audio/jobs/{job_id}").json()["status"], ids),
                strict=True))
        stop.set()

    submitted = len(ids)
    completed = sum(1 for s in statuses.values() if s == "completed")
    lost = submitted - completed
    cut = start + args.warmup * wall
    rows, memory = [], {}
    steady_jobs = jobs_at[-1][1] - next((n for t, n in reversed(jobs_at) if t <= cut), 0) \
        if jobs_at else 0
    for name_, points in samples.items():
        steady = [(t, m) for t, m in points if t >= cut]
        values = [m for _, m in steady] or [0.0]
        memory[name_] = {"first_mib": values[0], "last_mib": values[-1],
                         "max_mib": max(values),
                         "slope_pct_per_1000_jobs": slope_percent(steady, jobs_at)}
        memory[name_]["drift_pct_after_warmup"] = (
            memory[name_]["slope_pct_per_1000_jobs"] * steady_jobs / 1000)
        rows.append([name_, f"{values[0]:.0f}", f"{values[-1]:.0f}", f"{max(values):.0f}",
                     f"{memory[name_]['slope_pct_per_1000_jobs']:+.2f}",
                     f"{memory[name_]['drift_pct_after_warmup']:+.2f}"])
    print(f"{submitted} jobs{' (interrupted)' if interrupted.is_set() else ''} from "
          f"{args.clients} clients: {completed} completed, {lost} lost; "
          f"at most {args.window} in flight, all ended after {wall:.1f} s "
          f"({submitted / wall:.1f} jobs/s end to end)")
    print(table(["process", "RSS after warm-up MiB", "RSS at end MiB", "max MiB",
                 "slope % per 1,000 jobs",
                 f"drift % over {steady_jobs:,} jobs"], rows))
    result: dict[str, Any] = {"jobs": args.jobs, "submitted": submitted,
                              "interrupted": interrupted.is_set(), "clients": args.clients,
                              "completed": completed, "lost": lost, "wall_s": wall,
                              "window": args.window, "memory": memory,
                              "samples": {k: [(round(t - start, 1), round(m, 1)) for t, m in v]
                                          for k, v in samples.items()}}
    tag = "".join(f"_{k.removeprefix('NARRATOR_').lower()}{v}" for k, v in extra.items())
    name = f"soak_{args.jobs}{tag}" + ("_partial" if interrupted.is_set() else "")
    save(name, result)
    plots.lines(RESULTS / f"{name}.png", f"Soak: {args.jobs:,} jobs on Postgres + Redis"
                + "".join(f", {k.removeprefix('NARRATOR_')}={v}" for k, v in extra.items()),
                "seconds", "RSS (MiB)",
                {name_: [(t - start, m) for t, m in points] for name_, points in samples.items()},
                {"jobs ended": [(t - start, n) for t, n in jobs_at]}, "jobs ended")


if __name__ == "__main__":
    main()
