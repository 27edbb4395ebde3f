"""Queue and task names: where each kind of work goes, for the API and the workers alike."""

import re
from collections.abc import Iterable
from typing import Protocol

REALTIME = "realtime"
BATCH = "batch"  # plans and webhooks: any worker (and assembly where no worker takes ASSEMBLY)
ASSEMBLY = "assembly"  # assembly: CPU workers, so a GPU worker never idles its GPU on it
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_queues(model_id: str) -> tuple[str, str]:
    """Return the realtime and batch queues of one model: only its workers consume them."""
    name = _UNSAFE.sub("_", model_id)
    return f"{REALTIME}.{name}", f"{BATCH}.{name}"


def worker_queues(model_ids: list[str], assembles: bool = True) -> list[str]:
    """Return the queues a worker serving `model_ids` consumes, realtime first."""
    pairs = [model_queues(m) for m in model_ids]
    return [q for q, _ in pairs] + [q for _, q in pairs] + [BATCH] + \
        ([ASSEMBLY] if assembles else [])


class Live(Protocol):
    """What a worker's registry record says about it (core.registry.WorkerRecord)."""

    @property
    def queues(self) -> tuple[str, ...]: ...

    @property
    def state(self) -> str: ...


def assembly_queue(workers: Iterable[Live]) -> str:
    """Return where an assembly goes, given the live workers' registry records: ASSEMBLY
    while a ready worker takes it, else BATCH (GPU workers assemble when no CPU worker runs,
    and leave it to CPU workers otherwise, so a GPU never idles through an assembly)."""
    takers = [w for w in workers if ASSEMBLY in w.queues and w.state == "ready"]
    return ASSEMBLY if takers else BATCH


def split_queues(queues: list[str]) -> tuple[list[str], list[str]]:
    """Split a worker's queues into Celery's pool and the realtime lane (workers/runtime/lane.py).

    A worker with only realtime queues has no batch work to starve them: its pool takes them.
    """
    lane = [q for q in queues if q.startswith(f"{REALTIME}.")]
    pooled = [q for q in queues if q not in lane]
    return (pooled, lane) if pooled else (lane, [])


# Task names: the API and the reaper send tasks by name, never importing them.
PLAN, PLAN_MANY, SYNTHESIZE, ASSEMBLE, NOTIFY, SPEAK, ENCODE, ALIGN = (
    "narrator.plan", "narrator.plan_many", "narrator.synthesize", "narrator.assemble",
    "narrator.notify", "narrator.speak", "narrator.encode_fragment", "narrator.align_segment")
