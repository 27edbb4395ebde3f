"""Wake-ups on a folder for the embedded mode: inotify where the OS has it, else a poll.

The embedded broker and the sync result channel are folders that messages are renamed into.
Polling them every few milliseconds costs CPU on both sides while Piper wants every core
(bench.sync_overhead: the API's 2 ms poll of a result folder took 132 core-ms
per 17 s answer, the idle worker's two 10 ms broker polls 0.05 of a core). A watch wakes its
waiter as a file lands instead. Without inotify (not Linux, or the per-user limit of inotify
instances reached) `active` is false and callers poll as before.
"""

import asyncio
import contextlib
import select
import time
from pathlib import Path

try:
    from inotify_simple import INotify, flags

    MASK = flags.MOVED_TO | flags.CLOSE_WRITE
except ImportError:  # not installed off Linux (pyproject: linux only)
    INotify = None
    MASK = 0


class FolderWatch:
    """Wakes a waiter when a file is renamed or written into one folder."""

    def __init__(self, folder: str | Path) -> None:
        self._inotify: INotify | None = None
        if INotify is None:
            return
        # OSError: too many inotify instances (EMFILE), or no folder; AttributeError: a libc
        # without inotify.
        with contextlib.suppress(OSError, AttributeError):
            inotify = INotify(nonblocking=True)
            try:
                inotify.add_watch(str(folder), MASK)
            except OSError:
                inotify.close()
                raise
            self._inotify = inotify

    @property
    def active(self) -> bool:
        """Say whether waits end when a file lands (else they only time out)."""
        return self._inotify is not None

    def wait(self, seconds: float) -> None:
        """Block until a file lands in the folder or `seconds` pass."""
        if self._inotify is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self._inotify], [], [], seconds)
        if ready:
            self._drain()

    async def wait_async(self, seconds: float) -> None:
        """Wait in the event loop until a file lands in the folder or `seconds` pass."""
        if self._inotify is None:
            await asyncio.sleep(seconds)
            return
        loop, woken = asyncio.get_running_loop(), asyncio.Event()
        fd = self._inotify.fileno()
        loop.add_reader(fd, woken.set)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), seconds)
        finally:
            loop.remove_reader(fd)
        self._drain()

    def _drain(self) -> None:
        """Read the pending events (their content is not needed: the caller looks)."""
        if self._inotify is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                self._inotify.read(timeout=0)

    def close(self) -> None:
        """Release the inotify instance."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


def available(folder: str | Path = "/") -> bool:
    """Say whether folders can be watched here (a watch made and closed at once)."""
    watch = FolderWatch(folder)
    try:
        return watch.active
    finally:
        watch.close()
