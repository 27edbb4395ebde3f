"""Embedded mode's folders wake their readers as files land (inotify), not at their polls."""

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from core import channel as channel_module
from core.channel import FileChannel, Message
from core.wakeup import FolderWatch, available

pytestmark = pytest.mark.skipif(not available(), reason="no inotify here")


def _land_later(folder: Path, name: str, after: float, data: bytes = b"x") -> threading.Thread:
    """Write a file under a temporary name and rename it into `folder` after `after` s."""
    def land() -> None:
        time.sleep(after)
        (folder / f".{name}.tmp").write_bytes(data)
        os.replace(folder / f".{name}.tmp", folder / name)

    thread = threading.Thread(target=land)
    thread.start()
    return thread


def test_a_wait_ends_when_a_file_is_renamed_in_and_times_out_otherwise(tmp_path: Path) -> None:
    watch = FolderWatch(tmp_path)
    try:
        started = time.monotonic()
        watch.wait(0.3)  # nothing lands: the whole wait
        assert time.monotonic() - started >= 0.29
        lander = _land_later(tmp_path, "message", 0.2)
        started = time.monotonic()
        watch.wait(30)
        assert time.monotonic() - started < 10
        lander.join()
    finally:
        watch.close()


def test_an_async_wait_ends_when_a_file_lands(tmp_path: Path) -> None:
    async def waited() -> float:
        watch = FolderWatch(tmp_path)
        try:
            lander = _land_later(tmp_path, "frame", 0.2)
            started = time.monotonic()
            await watch.wait_async(30)
            lander.join()
            return time.monotonic() - started
        finally:
            watch.close()

    assert asyncio.run(waited()) < 10


def test_a_sync_result_reader_gets_frames_at_once_with_its_safety_poll_at_a_minute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channel_module, "WATCHED_LOOK_SECONDS", 60.0)
    channel = FileChannel(tmp_path)

    def worker() -> None:
        for n in range(3):
            time.sleep(0.2)
            channel.publish("req", Message("data", data=bytes([n])))
        channel.publish("req", Message("end"))

    async def read() -> list[Message]:
        return [m async for m in channel.listen("req", first_wait=120, idle_wait=120)]

    thread = threading.Thread(target=worker)
    started = time.monotonic()
    thread.start()
    got = asyncio.run(read())
    thread.join()
    assert [m.kind for m in got] == ["data", "data", "data", "end"]
    assert [m.data for m in got[:3]] == [b"\x00", b"\x01", b"\x02"]
    assert time.monotonic() - started < 30  # one safety poll alone would take 60 s
    assert not (tmp_path / "req").exists()


def test_without_inotify_a_reader_polls_and_still_gets_every_frame(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core import wakeup

    monkeypatch.setattr(wakeup, "INotify", None)
    assert not available(tmp_path)
    channel = FileChannel(tmp_path)
    channel.publish("req", Message("data", data=b"a"))
    channel.publish("req", Message("end"))

    async def read() -> list[Message]:
        return [m async for m in channel.listen("req", first_wait=5, idle_wait=5)]

    assert [m.kind for m in asyncio.run(read())] == ["data", "end"]
