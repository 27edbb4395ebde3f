"""Per-request result channels from a worker back to the API: a Redis stream, or files.

The sync path sends the request through the broker like any task; the worker answers on a
channel named by the request id. Messages are small frames: meta, data chunks, then end or
error. Redis streams are used with a Redis broker; the embedded mode uses a folder per request.
"""

import os
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
import redis
import redis.asyncio as aioredis

from core.settings import CoreSettings
from core.wakeup import FolderWatch

STREAM_TTL_SECONDS = 300
FILE_POLL_SECONDS = 0.002  # without inotify
WATCHED_LOOK_SECONDS = 0.5


@dataclass(frozen=True)
class Message:
    """One frame on a channel: `kind` is meta, data, end or error."""

    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    data: bytes = b""

    def pack(self) -> bytes:
        """Serialise to bytes: a length-prefixed JSON header, then the payload."""
        header = orjson.dumps({"kind": self.kind, "meta": self.meta})
        return struct.pack(">I", len(header)) + header + self.data

    @classmethod
    def unpack(cls, raw: bytes) -> "Message":
        """Parse bytes made by `pack`."""
        (size,) = struct.unpack(">I", raw[:4])
        header = orjson.loads(raw[4 : 4 + size])
        return cls(header["kind"], header["meta"], raw[4 + size :])


class ChannelTimeout(Exception):
    """No message arrived in time."""


class Channel(Protocol):
    """Write side (worker, sync) and read side (API, async) of per-request channels."""

    def publish(self, request_id: str, message: Message) -> None: ...

    def listen(self, request_id: str, first_wait: float,
               idle_wait: float) -> AsyncIterator[Message]: ...


class RedisChannel:
    """One Redis stream per request, read with blocking XREAD."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._sync: redis.Redis | None = None
        self._async: aioredis.Redis | None = None

    @staticmethod
    def key(request_id: str) -> str:
        """Return the stream key of a request."""
        return f"narrator:speech:{request_id}"

    def publish(self, request_id: str, message: Message) -> None:
        """Append a frame to the request's stream."""
        if self._sync is None:
            self._sync = redis.Redis.from_url(self.url)
        pipe = self._sync.pipeline(transaction=False)
        pipe.xadd(self.key(request_id), {"m": message.pack()})
        pipe.expire(self.key(request_id), STREAM_TTL_SECONDS)
        pipe.execute()

    async def listen(self, request_id: str, first_wait: float,
                     idle_wait: float) -> AsyncIterator[Message]:
        """Yield frames until end or error; raise ChannelTimeout when the worker goes quiet."""
        if self._async is None:
            # No socket timeout (redis-py 8 defaults to 5 s): XREAD's own `block` bounds the
            # wait, and a worker may take longer than 5 s to send the first frame.
            self._async = aioredis.Redis.from_url(self.url, socket_timeout=None,
                                                  socket_connect_timeout=5)
        key, last, wait = self.key(request_id), "0", first_wait
        try:
            while True:
                reply: Any = await self._async.xread({key: last}, block=int(wait * 1000),
                                                     count=64)
                if not reply:
                    raise ChannelTimeout(request_id)
                for entry_id, fields in reply[0][1]:
                    last = entry_id
                    message = Message.unpack(fields[b"m"])
                    yield message
                    if message.kind in ("end", "error"):
                        return
                wait = idle_wait
        finally:
            await self._async.delete(key)


class FileChannel:
    """One folder per request, one file per frame; the reader wakes as a frame lands (an
    inotify watch, core/wakeup.py) or, without inotify, polls every couple of ms."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def publish(self, request_id: str, message: Message) -> None:
        """Write the next frame atomically (write, then rename)."""
        folder = self.root / request_id
        folder.mkdir(parents=True, exist_ok=True)
        seq = len([p for p in os.listdir(folder) if not p.endswith(".tmp")])
        tmp = folder / f"{seq:06d}.tmp"
        tmp.write_bytes(message.pack())
        os.replace(tmp, folder / f"{seq:06d}")

    async def listen(self, request_id: str, first_wait: float,
                     idle_wait: float) -> AsyncIterator[Message]:
        """Yield frames until end or error; raise ChannelTimeout when the worker goes quiet."""
        folder, seq = self.root / request_id, 0
        folder.mkdir(parents=True, exist_ok=True)  # to watch it before the worker writes
        watch = FolderWatch(folder)
        # With a watch a frame wakes the reader; looking again now and then is a safety net.
        look = WATCHED_LOOK_SECONDS if watch.active else FILE_POLL_SECONDS
        deadline = time.monotonic() + first_wait
        try:
            while True:
                path = folder / f"{seq:06d}"
                try:
                    raw = path.read_bytes()
                except FileNotFoundError:
                    left = deadline - time.monotonic()
                    if left < 0:
                        raise ChannelTimeout(request_id) from None
                    await watch.wait_async(min(look, left + 0.001))
                    continue
                seq += 1
                deadline = time.monotonic() + idle_wait
                message = Message.unpack(raw)
                yield message
                if message.kind in ("end", "error"):
                    return
        finally:
            watch.close()
            for leftover in folder.glob("*") if folder.exists() else ():
                leftover.unlink(missing_ok=True)
            if folder.exists():
                folder.rmdir()


def channel_for(settings: CoreSettings) -> Channel:
    """Return the channel that matches the broker."""
    if settings.embedded_broker:
        return FileChannel(settings.channel_dir)
    return RedisChannel(settings.broker_url)
