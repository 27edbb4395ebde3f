"""How a worker reaches an engine's child process: a child started on a private socket, the
connection to it, and a child that a previous image of the worker started and detached.

The socket lives in a private folder (mode 0700) and the connection also needs the child's
authentication key, so only the worker that started the child can reach it. Because it is a
socket and not an anonymous pipe, the child outlives the worker's Python image when the
worker recycles: the worker execs itself (same pid, so the child stays its child) and its new
image finds the child through ADOPT_ENV ("pid:key:socket") and connects again. A detached
child that nobody adopts within ADOPT_WAIT_SECONDS stops itself (engine_child.serve).
"""

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from workers.engines.engine_child import Build, serve

ADOPT_ENV = "NARRATOR_ENGINE_ADOPT"  # "pid:authkey hex:socket path", for the worker's next image
ADOPT_WAIT_SECONDS = 600.0  # a detached engine waits this long for the next image to adopt it
Launched = tuple[Any, str, bytes]  # a started child, its socket's address and its key


def launch(build: Build, role: str, standby: bool) -> Launched:
    """Start a child that listens on a new private socket (a standby prepares first)."""
    folder = tempfile.mkdtemp(prefix="narrator-engine-")  # mode 0700
    address, authkey = str(Path(folder) / "engine.sock"), os.urandom(32)
    context = multiprocessing.get_context("spawn")  # never fork a CUDA parent
    name = f"engine-{role}" + ("-standby" if standby else "")
    process = context.Process(target=serve, name=name, args=(
        build, address, authkey, ADOPT_WAIT_SECONDS, standby))
    process.start()
    return process, address, authkey


def stop(launched: Launched) -> None:
    """Stop a child that serves no one (a standby) and remove its socket's folder."""
    process, address, _ = launched
    process.kill()
    process.join(10)
    shutil.rmtree(Path(address).parent, ignore_errors=True)


def connect(address: str, authkey: bytes, process: Any, timeout: float) -> Connection | None:
    """Connect to the child's socket once it listens; None if it dies or never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return Client(address, family="AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if not process.is_alive():
                return None
            time.sleep(0.02)
        except (AuthenticationError, EOFError, OSError):
            return None
    return None


def adoption(pid: int, authkey: bytes, address: str) -> str:
    """The ADOPT_ENV value that lets the worker's next image find this child."""
    return f"{pid}:{authkey.hex()}:{address}"


def adopted(value: str) -> tuple["AdoptedChild", bytes, str] | None:
    """The child, key and socket an ADOPT_ENV value names; None if it is malformed."""
    try:
        pid, key, address = value.split(":", 2)
        return AdoptedChild(int(pid)), bytes.fromhex(key), address
    except ValueError:
        return None


class AdoptedChild:
    """The running engine child a previous image of this process started (exec keeps the
    pid, so it is still this process's child): what EngineProcess uses of a Process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exitcode: int | None = None

    def is_alive(self) -> bool:
        if self.exitcode is not None:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not ours, or already reaped
            self.exitcode = -1
            return False
        if pid == 0:
            return True
        self.exitcode = os.waitstatus_to_exitcode(status)
        return False

    def join(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
