"""The embedded broker: kombu's filesystem transport, with messages written atomically and
consumers woken as they land.

kombu's own `_put` opens the final file name and then writes into it, so a consumer polling
the folder can take the file while it is still empty and fail to parse it (the worker then
stops with "Unrecoverable error: JSONDecodeError"). Here each message is written under a
hidden temporary name and renamed into place, which is atomic on one filesystem.

kombu's consumers look at the folder every `polling_interval` (10 ms here): on average half
of that before a sync request starts, and CPU at idle. Here a consumer that can take a
message waits on an inotify watch of the folder instead (core/wakeup.py), looking again at
least every WATCHED_LOOK seconds; one that cannot take any (its prefetch is full: no file
event tells it a task has ended) and a host without inotify keep kombu's polling.
"""

import os
import uuid
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

from core.wakeup import FolderWatch

# With a watch, a safety net only: every message is renamed into the folder, which wakes it.
WATCHED_LOOK = 1.0

SCHEME = "narratorfs"


class Channel(filesystem.Channel):
    """A filesystem channel whose messages appear whole or not at all."""

    # The stubs of kombu's two base classes disagree on this signature.
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # The leading dot keeps consumers from matching the name until it is renamed.
        temporary = os.path.join(self.data_folder_out, f".{name}.tmp")
        with open(temporary, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(temporary, final)


class Transport(filesystem.Transport):
    """kombu's filesystem transport with the atomic channel and inotify wake-ups."""

    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self._watch: FolderWatch | None = None

    # The stubs of kombu's two base classes disagree on this signature.
    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """Deliver one message, as kombu's loop does, waiting on the folder between looks."""
        # Set once the transport is connected, as it is before anything drains it.
        assert self.cycle is not None
        assert self.client is not None
        assert self.channels is not None
        started = monotonic()
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            if self._watch is None:  # made after a look: look once more before waiting on it
                options = self.client.transport_options or {}
                self._watch = FolderWatch(options.get("data_folder_in", "data_in"))
                continue
            left = None if timeout is None else timeout - (monotonic() - started)
            if left is not None and left <= 0:
                raise TimeoutError  # socket.timeout, as kombu's loop raises
            wakes = self._watch.active and any(
                channel.qos.can_consume() for channel in self.channels if channel._consumers)
            pause = WATCHED_LOOK if wakes else self.polling_interval or WATCHED_LOOK
            self._watch.wait(pause if left is None else min(pause, left))

    def close_connection(self, connection: Any) -> None:
        """Close the channels and the watch."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        super().close_connection(connection)


TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"
