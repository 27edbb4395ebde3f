"""bench.gpu_product --crash: the GPU worker's batch engine dies, and the worker goes on.

The batch engine's process and everything under it (its stage processes, its forkserver) are
killed with SIGKILL, as a crash of the engine ends them, and one job of SEGMENTS is submitted
at once. Requests still in the engine fail with it (in bench.gpu_product: what the phases
before it left there, such as the live phase's cancelled book); their tasks retry. The worker
starts the engine again when that job's first segment asks for it, from its standby
(VLLM_STANDBY: a process that has already imported vLLM-Omni) when it has one. Measured:
seconds from the kill to the engine started again and to the job done, where they went by
the worker's log, and what the standby processes held before the kill (host memory; whether
any was on the GPU).

What it leaves out: a crash that leaves the engine's process alive but broken (a stage stuck
or dead under a living parent) is not this; nor is the partition's engine, which is started
again the same way.
"""

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

# Events of the worker's log after the kill, in order (the first of each).
STEPS = [
    ("engine process exit seen", "engine.process_exited"),
    ("standby taken", "engine.standby_taken"),
    ("engine's stages started", "engine.stages_started"),
    ("engine started", "engine.process_started"),
    ("next standby started", "engine.standby_started"),
    ("next standby ready", "engine.standby_ready"),
]


def events(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a worker's log."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


def engine_pids(log: list[dict[str, Any]]) -> tuple[int | None, list[int]]:
    """The batch engine's process that runs now, and every standby started (either role)."""
    engine, standbys = None, []
    for event in log:
        if event.get("event") in ("engine.process_started", "engine.process_adopted") \
                and event.get("role") == "batch":
            engine = event["pid"]
        if event.get("event") == "engine.standby_started":
            standbys.append(event["pid"])
    return engine, standbys


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        children = parents.get(queue.pop(), [])
        found += children
        queue += children
    return found


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def gpu_pids() -> set[int]:
    """The processes that hold a CUDA context (nvidia-smi), or none where it is missing."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listed = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout
        return {int(x) for x in listed.split() if x.isdigit()}
    return set()


def measure(log: Path, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Kill the batch engine's process tree, run `job` at once; the timeline."""
    engine, standbys = engine_pids(events(log.read_text(errors="replace")))
    if engine is None:
        raise RuntimeError("no batch engine process in the worker's log")
    alive = [pid for pid in standbys if Path(f"/proc/{pid}").exists()]
    standby_tree = alive + [child for pid in alive for child in descendants(pid)]
    on_gpu = gpu_pids()
    mark = log.stat().st_size
    victims = [engine, *descendants(engine)]
    killed = time.time()
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    result = job()
    after = events(log.read_bytes()[mark:].decode(errors="replace"))
    steps = []
    for name, needle in STEPS:
        for event in after:
            if event.get("event") == needle and event.get("role", "batch") == "batch":
                stamp = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
                steps.append((name, round(stamp.timestamp() - killed, 1)))
                break
    return {"killed": len(victims), "standbys": len(alive),
            "standby_rss_mib": rss_mib(standby_tree),
            "standby_on_gpu": sorted(on_gpu.intersection(standby_tree)),
            "steps": steps, "job": result}


def rows(mode: str, r: dict[str, Any], segments: int) -> list[list[str]]:
    """The crash's rows of bench.gpu_product's table."""
    steps = dict(r["steps"])
    job = r["job"]
    started = steps.get("engine started")
    return [
        [mode, "batch engine killed: kill -> engine started again",
         "not seen" if started is None else f"{started:.1f} s",
         "; ".join(f"{name} +{at} s" for name, at in r["steps"]) +
         f"; {r['killed']} processes killed"],
        [mode, f"batch engine killed: the job submitted at the kill ({segments} segments)",
         f"{job['wall_s']:.1f} s, {job['rate']:.1f} audio-s/s",
         f"last segment at {job['synthesis_s']:.1f} s; GPU {job['gpu']}"],
        [mode, "standby engine processes before the kill",
         f"{r['standbys']}, {r['standby_rss_mib']:.0f} MiB resident",
         "on the GPU: " + (", ".join(map(str, r["standby_on_gpu"])) or "none")],
    ]
