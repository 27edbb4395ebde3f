"""Live workers: what each one serves and whether its engine is warm.

Workers publish a record on start ("warming"), once their engine has run ("ready"), and every
few seconds after; records expire when a worker stops refreshing them. The API reads them to
list models and voices it cannot read itself (a GPU checkpoint mounted only on GPU workers)
and to say in /readyz which workers can take work. Redis keys with a TTL with a Redis broker,
files under DATA_DIR/workers in embedded mode.
"""

import dataclasses
import os
import socket
import time
from pathlib import Path
from typing import Any, Protocol

import orjson
import redis

from core.catalog import ModelInfo, VoiceInfo
from core.settings import CoreSettings

TTL_SECONDS = 30
FAILED_TTL_SECONDS = 600  # a worker whose engine failed exits; /readyz says why for this long
REFRESH_SECONDS = 10
PREFIX = "narrator:worker:"


@dataclasses.dataclass(frozen=True)
class WorkerRecord:
    """One worker process as it describes itself."""

    id: str
    state: str  # warming | ready | failed
    queues: tuple[str, ...]
    models: tuple[ModelInfo, ...]
    at: float
    reason: str = ""  # why a failed worker failed
    # Its realtime partition (workers/runtime/partition.py): "" (none), starting, ready or failed;
    # a failed one's reason follows a colon.
    realtime: str = ""
    slots: int = 0  # the segments it runs at once (its pool's threads), for dispatch

    @property
    def ttl(self) -> int:
        """Return how long the record lives without a refresh."""
        return FAILED_TTL_SECONDS if self.state == "failed" else TTL_SECONDS

    def dump(self) -> bytes:
        """Serialise to JSON."""
        return orjson.dumps(dataclasses.asdict(self), default=sorted)  # frozensets as lists

    @classmethod
    def load(cls, raw: bytes) -> "WorkerRecord":
        """Parse what `dump` wrote."""
        data = orjson.loads(raw)
        return cls(id=data["id"], state=data["state"], queues=tuple(data["queues"]),
                   models=tuple(_model(m) for m in data["models"]), at=data["at"],
                   reason=data.get("reason", ""), realtime=data.get("realtime", ""),
                   slots=data.get("slots", 0))


def _model(data: dict[str, Any]) -> ModelInfo:
    voices = tuple(VoiceInfo(**(v | {"languages": tuple(v["languages"])}))
                   for v in data["voices"])
    return ModelInfo(**(data | {"languages": tuple(data["languages"]),
                                "extras": frozenset(data["extras"]), "voices": voices}))


def worker_id() -> str:
    """Return an id for this process: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Registry(Protocol):
    """Where worker records live."""

    def publish(self, record: WorkerRecord) -> None: ...

    def remove(self, worker: str) -> None: ...

    def live(self) -> list[WorkerRecord]: ...


class RedisRegistry:
    """Records as Redis keys that expire."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def publish(self, record: WorkerRecord) -> None:
        """Write or refresh a record."""
        self.client.set(PREFIX + record.id, record.dump(), ex=record.ttl)

    def remove(self, worker: str) -> None:
        """Forget a worker that is stopping."""
        self.client.delete(PREFIX + worker)

    def live(self) -> list[WorkerRecord]:
        """Return the records that have not expired."""
        keys = list(self.client.scan_iter(match=PREFIX + "*", count=500))
        values: list[Any] = self.client.mget(keys) if keys else []
        return [WorkerRecord.load(v) for v in values if v]


class FileRegistry:
    """Records as files; a file not refreshed for TTL_SECONDS is stale."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, worker: str) -> Path:
        return self.root / (worker.replace("/", "_").replace(":", "_") + ".json")

    def publish(self, record: WorkerRecord) -> None:
        """Write or refresh a record atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._path(record.id).with_suffix(".tmp")
        tmp.write_bytes(record.dump())
        tmp.replace(self._path(record.id))

    def remove(self, worker: str) -> None:
        """Forget a worker that is stopping."""
        self._path(worker).unlink(missing_ok=True)

    def live(self) -> list[WorkerRecord]:
        """Return the records refreshed recently."""
        now, records = time.time(), []
        for path in self.root.glob("*.json") if self.root.exists() else ():
            try:
                age = now - path.stat().st_mtime
                if age < FAILED_TTL_SECONDS:
                    record = WorkerRecord.load(path.read_bytes())
                    if age < record.ttl:
                        records.append(record)
            except (OSError, ValueError):
                continue
        return records


def registry_for(settings: CoreSettings) -> Registry:
    """Return the registry that matches the broker."""
    if settings.embedded_broker:
        return FileRegistry((settings.data_dir / "workers").resolve())
    return RedisRegistry(settings.broker_url)
