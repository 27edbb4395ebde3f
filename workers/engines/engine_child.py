"""The engine's own process (workers/engines/engine_process.py starts it): it builds the
engine once its worker has connected over the private Unix socket, serves that worker's
requests, and after a DETACH waits for the worker's next image to adopt it.

A standby is the same process started ahead of need: it builds the engine object and does
the imports of its start (vLLM-Omni's: about 25 s on an H100) at once, then waits, for as long
as its worker lives, until the worker connects because its engine died."""

import concurrent.futures
import contextlib
import itertools
import os
import pickle
import queue
import shutil
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Any

import structlog

from core.logs import configure
from workers.engines import Audio
from workers.engines.qwen3_tts import OutputKind

log = structlog.get_logger()
Build = Callable[[], Any]  # picklable: it is called in the child to make the real engine
DETACH = "detach"  # the worker's message: keep the engine running, I exec and come back


class EngineProcessError(RuntimeError):
    """The engine's process exited or could not start."""


FIRST_CONNECTION_SECONDS = 120.0  # a child whose worker never connects (killed) exits
PARENT_CHECK_SECONDS = 2.0  # how often a waiting standby looks whether its worker still lives


class Outbox:
    """The child's messages to the worker, realtime ones first.

    One connection carries everything, and a batch segment's audio is 1.9 MB: when a wave of
    segments ends together, a streamed request's chunk queued behind 64 of them would wait
    for 120 MB to be pickled and read. Chunks and realtime answers jump that queue; the
    socket itself then holds at most the one message being sent.
    """

    REALTIME, BATCH, LAST = 0, 1, 2

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._order = itertools.count()

    def put(self, message: tuple[str, int, Any] | None, rank: int) -> None:
        """Queue one message (None, ranked LAST, ends the sender)."""
        self._queue.put((rank, next(self._order), message))

    def send_all(self, results: Connection) -> None:
        """Send messages in rank order, then arrival order, until None (or the worker is
        gone)."""
        with contextlib.suppress(OSError):
            while (message := self._queue.get()[2]) is not None:
                results.send(message)


def serve(build: Build, address: str, authkey: bytes, adopt_wait: float,
          standby: bool = False) -> None:
    """Child: build the engine once its worker has connected, serve that connection, and
    after a DETACH the worker's next image, until one disconnects without detaching.
    `standby`: build and prepare the engine first, then wait for the worker while it lives."""
    configure()  # the worker's log format, in the worker's log (stderr is shared)
    parent = os.getppid()  # the worker
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(4)
    engine: Any = None
    started = False
    served = _Count()
    wait: float | None = FIRST_CONNECTION_SECONDS  # the worker connects as soon as this listens
    try:
        if standby:
            try:
                engine = _prepared(build)
            except Exception:  # the worker starts a plain child instead, which says why
                log.exception("engine.standby_failed")
                return
            wait = None
        else:
            log.info("engine.process_building")
        while (connection := _accept(listener, authkey, wait, parent)) is not None:
            if not started:
                try:
                    engine = engine or build()
                    engine.start()
                    started = True
                except BaseException as error:  # the worker reports why the start failed
                    connection.send(("failed", -1, _picklable(error)))
                    return
            if not _serve_connection(engine, connection, served):
                started = False  # closed by its last worker image
                break
            log.info("engine.detached", wait_seconds=adopt_wait, served=served.value)
            wait = adopt_wait
        else:
            if wait is None:
                log.info("engine.standby_unused")  # its worker has exited
            else:
                log.warning("engine.not_adopted", wait_seconds=wait)
    finally:
        listener.close()
        shutil.rmtree(Path(address).parent, ignore_errors=True)  # no one will connect again
        if started:
            engine.close()


def _prepared(build: Build) -> Any:
    """Build the engine object and run its prepare() (the imports its start needs)."""
    began = time.perf_counter()
    engine = build()
    prepare = getattr(engine, "prepare", None)
    if prepare is not None:
        prepare()
    log.info("engine.standby_ready", seconds=round(time.perf_counter() - began, 1))
    return engine


def _accept(listener: socket.socket, authkey: bytes, timeout: float | None,
            parent: int) -> Connection | None:
    """Return the next authenticated connection, or None after `timeout` seconds (None: once
    `parent`, the worker, has exited)."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    while True:
        if deadline is None:
            if os.getppid() != parent:  # the worker is gone: nobody will connect
                return None
            listener.settimeout(PARENT_CHECK_SECONDS)
        elif (left := deadline - time.monotonic()) > 0:
            listener.settimeout(left)
        else:
            return None
        try:
            accepted, _ = listener.accept()
        except TimeoutError:
            if deadline is None:
                continue
            return None
        accepted.setblocking(True)
        connection = Connection(accepted.detach())
        try:
            deliver_challenge(connection, authkey)
            answer_challenge(connection, authkey)
        except (AuthenticationError, EOFError, OSError):
            connection.close()
            continue
        return connection


class _Count:
    """Requests the engine has answered (its next adopter skips the warm-up if any)."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


def _serve_connection(engine: Any, connection: Connection, served: _Count) -> bool:
    """Serve one worker image: take (call id, request, reference, kind) until it closes or
    sends DETACH. Return whether it detached (the engine then waits for its next image)."""
    outbox = Outbox()
    # One sender: the engine's loop never blocks on a full socket.
    sender = threading.Thread(target=outbox.send_all, args=(connection,),
                              name="engine-results", daemon=True)
    sender.start()
    outbox.put(("started", -1, (engine.sample_rate, served.value)), outbox.REALTIME)

    def finished(call: int, rank: int, future: concurrent.futures.Future[Audio]) -> None:
        served.add()
        error = future.exception()
        outbox.put(("error", call, _picklable(error)) if error else
                   ("done", call, future.result()), rank)

    detached = False
    while (message := _receive_or_none(connection)) is not None:
        if message == DETACH:
            detached = True
            break
        call, request, reference, kind = message
        rank = outbox.REALTIME if request.realtime else outbox.BATCH
        on_chunk = _chunks_to(outbox, call, request.request_id) \
            if kind is OutputKind.DELTA else None
        try:
            future = engine.submit(request, kind, on_chunk, reference=reference)
        except Exception as error:  # the request fails, the engine goes on
            outbox.put(("error", call, _picklable(error)), rank)
            continue
        future.add_done_callback(lambda f, call=call, rank=rank: finished(call, rank, f))
    if not detached:
        engine.close()  # before the sender ends: what the engine finishes is still sent
    outbox.put(None, outbox.LAST)
    sender.join(30)
    connection.close()
    return detached


def _chunks_to(outbox: Outbox, call: int, request_id: str) -> Callable[[Audio], None]:
    """Return a streamed call's chunk callback; it logs how long the engine took to the
    first one (the worker logs the same seen from its side: the difference is the socket)."""
    asked = time.perf_counter()
    first = True

    def on_chunk(audio: Audio) -> None:
        nonlocal first
        if first:
            first = False
            log.info("engine.first_chunk", request_id=request_id,
                     ms=round((time.perf_counter() - asked) * 1000, 1))
        outbox.put(("chunk", call, audio), outbox.REALTIME)

    return on_chunk


def _receive_or_none(requests: Connection) -> Any:
    try:
        return requests.recv()
    except (EOFError, OSError):  # the worker is gone: free the GPU all the same
        return None


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
    except Exception:  # anything unpicklable travels as its text
        return EngineProcessError(repr(error))
    return error
