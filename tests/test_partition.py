"""Where a GPU worker sends realtime requests (workers/runtime/partition.py): its realtime partition
while the batch engine holds batch work or has lost its process, the batch engine while that
is idle or while the partition is starting, has failed or has lost its process; a lost one is
started again."""

import threading
from typing import Any

from workers.runtime.partition import Partition


class Engine:
    """An engine at the boundary: what Partition reads of one (no audio is made here)."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail = name, fail
        self.batch_in_flight = 0
        self.running = False
        self.starts = 0
        self.info: Any = None

    def start(self) -> None:
        self.starts += 1
        if self.fail:
            raise RuntimeError("no memory left for the realtime engine")
        self.running = True


def picked(partition: Partition) -> object:
    """Return the engine a realtime request would go to now."""
    return partition.engine()


def started(batch: Engine, realtime: Engine) -> Partition:
    batch.running = True  # the worker's batch engine is up before its partition starts
    changes = threading.Semaphore(0)
    partition = Partition(batch, realtime, warm=lambda _e: None,  # type: ignore[arg-type]
                          on_change=changes.release)
    partition.start()
    partition.join(5)
    return partition


def test_realtime_requests_go_to_the_partition_only_while_the_batch_engine_is_busy() -> None:
    batch, realtime = Engine("batch"), Engine("realtime")
    partition = started(batch, realtime)
    assert partition.status == "ready"
    assert picked(partition) is batch  # idle: the batch engine's first audio is sooner
    batch.batch_in_flight = 64
    assert picked(partition) is realtime


def test_a_partition_that_cannot_start_leaves_the_lane_on_the_batch_engine() -> None:
    batch, realtime = Engine("batch"), Engine("realtime", fail=True)
    batch.batch_in_flight = 64
    partition = started(batch, realtime)
    assert partition.status == "failed: RuntimeError: no memory left for the realtime engine"
    assert picked(partition) is batch
    assert realtime.starts == 1  # a failed start is not retried: its reason stays visible


def test_a_partition_whose_process_died_is_started_again_and_the_batch_engine_answers(
        monkeypatch: Any) -> None:
    batch, realtime = Engine("batch"), Engine("realtime")
    batch.batch_in_flight = 64
    partition = started(batch, realtime)
    realtime.running = False  # its child process died
    monkeypatch.setattr("workers.runtime.partition.RESTART_SECONDS", 0.0)
    assert picked(partition) is batch
    partition.join(5)
    assert realtime.starts == 2
    assert partition.state == "ready"
    assert picked(partition) is realtime


def test_while_the_batch_engines_process_is_down_the_partition_answers() -> None:
    """A crashed batch engine holds no batch work, but starting it again takes a minute: an
    idle lane goes to the warm partition meanwhile, and back once the batch engine runs."""
    batch, realtime = Engine("batch"), Engine("realtime")
    partition = started(batch, realtime)
    assert picked(partition) is batch
    batch.running = False  # its child process died; its restart is under way
    assert picked(partition) is realtime
    batch.running = True
    assert picked(partition) is batch
