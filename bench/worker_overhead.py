"""What a Celery worker adds per segment, measured on the CPU with a stand-in engine.

The stand-in is the GPU engine's timing shape only: it holds one of 64 engine slots (like
VllmOmniEngine's in-flight bound) for a fixed time and returns 20 s of 24 kHz noise. What is
left is the worker's own cost: claiming the segment, writing the part (float WAV), and
the counters. Efficiency = ideal wall time (waves x engine time) / measured wall time, for
several worker thread counts; more threads than engine slots let finished segments be
written while new ones already occupy the engine.

    python -m bench.worker_overhead [--threads 64 96] [--waves 3] [--engine-seconds 2]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.common import save, table

SLOTS = 64


def run_one(threads: int, waves: int, engine_seconds: float) -> float:
    """Run one worker configuration in this process and return its wall time."""
    import numpy as np

    import workers.jobs.pipeline
    import workers.runtime.engine
    import workers.tasks
    from bench.gpu_engine import Bench
    from core.catalog import catalog
    from core.settings import CoreSettings

    noise = (np.random.default_rng(0).standard_normal(480000) * 0.1).astype(np.float32)
    slots = threading.BoundedSemaphore(SLOTS)

    class StandIn:
        info = catalog(CoreSettings())[0]
        sample_rate = 24000

        def start(self) -> None:
            """Nothing to start."""

        def synthesize(self, requests: list[Any]) -> list[Any]:
            with slots:
                time.sleep(engine_seconds)
                return [noise.copy() for _ in requests]

    engine = StandIn()
    for module in (workers.runtime.engine, workers.jobs.pipeline, workers.tasks):
        module.get_engine = lambda: engine  # type: ignore[attr-defined]
    bench = Bench(argparse.Namespace(frames=250, concurrency=[threads], ttfa_reps=1,
                                     waves=waves), engine)
    bench.start_worker(threads)
    wall, _ = bench.worker(SLOTS)
    return wall


def main() -> None:
    """Run each thread count in a fresh process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[64, 96])
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--engine-seconds", type=float, default=2.0)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(f"WALL {run_one(args.one, args.waves, args.engine_seconds)}", flush=True)
        os._exit(0)
    ideal = args.waves * args.engine_seconds
    rows, results = [], []
    for threads in args.threads:
        with tempfile.TemporaryDirectory() as data:
            env = os.environ | {"NARRATOR_DATA_DIR": data, "NARRATOR_ENGINE": "piper",
                                "NARRATOR_LOG_LEVEL": "WARNING", "NARRATOR_LOG_JSON": "1"}
            out = subprocess.run([sys.executable, "-m", "bench.worker_overhead", "--one",
                                  str(threads), "--waves", str(args.waves),
                                  "--engine-seconds", str(args.engine_seconds)],
                                 env=env, capture_output=True, text=True, timeout=600).stdout
        wall = float(next(line for line in out.splitlines() if line.startswith("WALL"))[5:])
        rows.append([threads, SLOTS, f"{wall:.2f}", f"{ideal:.2f}", f"{ideal / wall:.3f}"])
        results.append({"threads": threads, "wall_s": wall, "efficiency": ideal / wall})
    print(f"{SLOTS * args.waves} segments, {args.engine_seconds} s engine time each, "
          f"{SLOTS} engine slots, embedded broker and SQLite")
    print(table(["worker threads", "engine slots", "wall s", "ideal s", "efficiency"], rows))
    save("worker_overhead", {"waves": args.waves, "engine_seconds": args.engine_seconds,
                             "slots": SLOTS, "rows": results})


if __name__ == "__main__":
    main()
