"""A GPU worker recycled (SIGHUP) or restarted, timed, and where its start went by its log."""

import argparse
import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.gpu_platform import start, stop, wait_ready


def recycle(args: argparse.Namespace, worker: subprocess.Popen[bytes], log: Path
            ) -> dict[str, Any]:
    """SIGHUP the GPU worker (a recycle, as WORKER_MAX_TASKS makes one): it stops as on
    SIGTERM, execs itself and adopts its running engine. Seconds from the signal to its
    new image's `engine.ready` line, and where they went by its log."""
    mark = log.stat().st_size
    sent, launched = time.monotonic(), time.strftime("%H:%M:%S", time.gmtime())
    worker.send_signal(signal.SIGHUP)
    while '"engine.ready"' not in log.read_bytes()[mark:].decode(errors="replace"):
        if worker.poll() is not None or time.monotonic() - sent > args.start_timeout:
            raise RuntimeError("the worker did not come back from its recycle")
        time.sleep(0.1)
    seconds = time.monotonic() - sent
    text = log.read_bytes()[mark:].decode(errors="replace")
    return {"seconds": seconds, "adopted": "engine.process_adopted" in text,
            "steps": [("SIGHUP sent", launched), *start_steps(text, RECYCLE_STEPS)]}


def restart(url: str, args: argparse.Namespace, worker: subprocess.Popen[bytes],
            env: dict[str, str], log: Path, first_job: Callable[[str], dict[str, Any]]
            ) -> dict[str, Any]:
    """Stop the GPU worker and start it again (warm caches): seconds to ready, where they
    went by its log (engine stages, warm-up), and then one job of SEGMENTS, the first job
    after the start (does a shorter warm-up leave it slower?)."""
    stop(worker)  # (already stopped when this is a second restart)
    for _ in range(120):  # until its registry record is gone: the assembly worker's stays
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if httpx.get(f"{url}/readyz", timeout=5).json()["workers"].get(
                    "ready", 0) <= args.base_workers:
                break
        time.sleep(0.5)
    mark = log.stat().st_size
    launched = time.strftime("%H:%M:%S", time.gmtime())
    again = start(["worker"], env, log)
    try:
        seconds = wait_ready(url, args.start_timeout, [again], args.base_workers + 1)
        job = first_job(f"restarted-{mark}")
    finally:
        stop(again)
    return {"seconds": seconds, "first_job": job, "steps": [
        ("worker process launched", launched),
        *start_steps(log.read_bytes()[mark:].decode(errors="replace"))]}


# Lines of a worker's start, as vLLM, vLLM-Omni and Narrator log them (first match each).
START_STEPS = [
    ("worker CLI running", "worker.starting"),
    ("engine's early start", "engine.early_start"),
    ("engine process running", "engine.process_building"),
    ("Celery started (worker_init)", "worker.initialising"),
    ("engine process: vLLM-Omni imported", "[AsyncOmni] Initializing"),
    ("stage 0 process spawned", "Stage-0 set runtime devices"),
    ("stage 0 engine initialising", "stage0_replica0"),
    ("stage 0 weights loaded", "Model loading took"),
    ("stage 0 ready", "Stage 0 initialized"),
    ("stage 1 engine initialising", "stage1_replica0"),
    ("stage 1 ready", "Stage 1 initialized"),
    ("engine's stages started (AsyncOmni returned)", "engine.stages_started"),
    ("engine started", "engine.started"),
    ("warmed up", "engine.warmed_up"),
    ("ready", "engine.ready"),
]


RECYCLE_STEPS = [
    ("warm shutdown begins", "worker.recycling"),
    ("engine detached", "engine.process_detached"),
    ("new image's CLI running", "worker.starting"),
    ("Celery started (worker_init)", "worker.initialising"),
    ("engine adopted", "engine.process_adopted"),
    ("engine started", "engine.process_started"),  # only when it could not adopt
    ("warm-up skipped", "engine.warm_up_skipped"),
    ("ready", "engine.ready"),
]


def start_steps(text: str, steps: list[tuple[str, str]] = START_STEPS
                ) -> list[tuple[str, str]]:
    """Return the wall-clock time of each of `steps`' lines found in a worker's log."""
    found = []
    for name, needle in steps:
        for line in text.splitlines():
            if needle in line:
                stamp = re.search(r"\d\d:\d\d:\d\d(\.\d+)?", line)
                found.append((name, stamp.group(0) if stamp else "?"))
                break
    return found

