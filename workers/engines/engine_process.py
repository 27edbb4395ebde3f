"""An engine served from a child process of its own, behind the same protocol.

vLLM-Omni's AsyncOmni runs its output loop in the process that created it. In a GPU worker
that process also runs Celery, SQLAlchemy and the part writes of its task threads under
one GIL. Here the engine lives in a spawned child whose only Python work is the engine; the
worker's threads send requests over a socket and get audio back (a 20 s segment is 1.9 MB of
float32). bench.gpu_engine on an H100, one run: the worker went from 0.841 to 0.873 of raw
AsyncOmni's audio-s per wall-s.

The child is started on first use and started again after it dies; the requests it held fail
with EngineProcessError, so their tasks retry. With `standby`, a second child is started as
soon as the first is up: it imports vLLM-Omni and waits (engine_child.py). When the engine's
child dies, that standby becomes the engine, so the restart skips the import (20-21 s on an
H200: a killed engine was back in 57.6 s, docs/design/realtime-partition.md), and a new
standby is started behind it. A standby never touches the GPU.

The worker reaches its child over a private Unix socket (engine_link.py), so the engine can
outlive the worker's own Python image when the worker recycles (WORKER_MAX_TASKS,
WORKER_MAX_RSS_MB, SIGHUP): the worker detaches, execs itself and the new image adopts the
running engine instead of starting one. A GPU worker's recycle then costs Celery's start, not
vLLM-Omni's import, the stages' initialisation and the warm-up (about 90-150 s on an H100).
"""

import atexit
import concurrent.futures
import contextlib
import itertools
import os
import queue
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import structlog

from core.catalog import ModelInfo
from workers.engines import Audio, SpeechRequest, drain, engine_link, slots_for
from workers.engines.engine_child import DETACH, Build, EngineProcessError
from workers.engines.engine_link import ADOPT_ENV, Launched, connect
from workers.engines.qwen3_tts import OutputKind, Reference

log = structlog.get_logger()
References = Callable[[str], Reference | None]


class _Call:
    """One request in flight: its future, and its chunk queue when streamed."""

    def __init__(self, chunks: Callable[[Audio], None] | None) -> None:
        self.future: concurrent.futures.Future[Audio] = concurrent.futures.Future()
        self.chunks = chunks


class EngineProcess:
    """The engine protocol over an engine that runs in a child process."""

    def __init__(self, info: ModelInfo, build: Build, *, sample_rate: int,
                 max_in_flight: int = 64, references: References | None = None,
                 start_timeout: float = 1800, role: str = "batch",
                 standby: bool = False) -> None:
        self.info = info
        self.role = role  # "batch", or "realtime" for the partition: in logs and ADOPT_ENV
        adopt_env = ADOPT_ENV if role == "batch" else f"{ADOPT_ENV}_{role.upper()}"
        self._use_standby = standby
        self._standby: Launched | None = None  # a child that has imported, waiting
        self._adopt_env = adopt_env  # one variable per engine a worker holds
        self._build = build
        self._sample_rate = sample_rate
        self._references = references or (lambda _voice: None)
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._max_in_flight = max_in_flight
        self._start_timeout = start_timeout
        self._lock = threading.Lock()  # starts, stops and sends
        # One thread at a time waits on the child: two waitpid() calls race, and the loser
        # sees a child that is gone as still alive.
        self._reaping = threading.Lock()
        self._process: Any = None
        self._connection: Connection | None = None
        self._address = ""
        self._authkey = b""
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()
        self._receiver: threading.Thread | None = None
        self._detached: Connection | None = None  # the connection detach() gave up
        # Requests the engine had answered before this process connected to it: more than
        # none when this image adopted a warm engine (the warm-up is then skipped).
        self.served_before = 0
        self._early: concurrent.futures.Future[None] | None = None  # start_early's start
        self._closed = False  # closed or detached: a child that exits is not started again

    @property
    def sample_rate(self) -> int:
        """Return the model's sample rate."""
        return self._sample_rate

    @property
    def batch_in_flight(self) -> int:
        """Return how many batch requests hold engine slots now (realtime ones hold none)."""
        return self._max_in_flight - self._slots._value

    @property
    def running(self) -> bool:
        """Say whether the child is up with its engine started (never starts it, and never
        waits for a start in progress: a child being started is not running yet)."""
        process = self._process  # read without the lock, which a start holds throughout
        if process is None:
            return False
        with self._reaping:
            return bool(process.is_alive())

    def start_early(self) -> None:
        """Start the child and its engine now, in the background: a worker calls this first
        thing, so that vLLM-Omni's import and the stages' start overlap Celery's own start.
        The next start() waits for it, and raises what made it fail."""
        early: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._early = early

        def run() -> None:
            try:
                self._start()
            except BaseException as error:
                early.set_exception(error)
            else:
                early.set_result(None)

        threading.Thread(target=run, name="engine-early-start", daemon=True).start()

    def start(self) -> None:
        """Start the child and its engine, once; again if it has died. The first start of
        a recycled worker's new image adopts the engine its previous image detached."""
        early, self._early = self._early, None
        if early is not None:  # start_early's: wait for it, and fail as it did
            early.result()
            return
        self._start()

    def _start(self, after_exit: bool = False) -> None:
        with self._lock:
            if after_exit and self._closed:  # the worker stopped or detached meanwhile
                return
            self._closed = False
            if self._process is not None:
                with self._reaping:
                    if self._process.is_alive():
                        return
            adopt = os.environ.pop(self._adopt_env, "")
            if adopt and self._adopt(adopt):
                return
            self._spawn()

    def _spawn(self) -> None:
        launched = self._take_standby() or engine_link.launch(self._build, self.role, False)
        process, address, authkey = launched
        connection = connect(address, authkey, process, 60)
        if connection is None:
            process.kill()
            process.join(10)
            raise EngineProcessError(f"engine process did not listen (exit code "
                                     f"{process.exitcode})")
        if not connection.poll(self._start_timeout):
            process.kill()
            raise EngineProcessError(f"engine did not start in {self._start_timeout:.0f} s")
        try:
            kind, _, value = connection.recv()
        except (EOFError, OSError):
            kind, value = "failed", EngineProcessError(f"exit code {process.exitcode}")
        if kind != "started":
            process.join(30)
            raise EngineProcessError(f"engine failed to start: {value!r}") from value
        atexit.register(self.close)  # before multiprocessing joins its children at exit
        self._attach(process, connection, address, authkey)
        log.info("engine.process_started", model=self.info.id, role=self.role, pid=process.pid)
        self._launch_standby()

    def _launch_standby(self) -> None:
        if self._use_standby and self._standby is None:
            self._standby = engine_link.launch(self._build, self.role, True)
            log.info("engine.standby_started", model=self.info.id, role=self.role,
                     pid=self._standby[0].pid)

    def _take_standby(self) -> Launched | None:
        """Return the standby to become the engine, if one is alive (else clear it away)."""
        standby, self._standby = self._standby, None
        if standby is None:
            return None
        if standby[0].is_alive():
            log.info("engine.standby_taken", model=self.info.id, role=self.role, pid=standby[0].pid)
            return standby
        engine_link.stop(standby)
        return None

    def _adopt(self, adopt: str) -> bool:
        """Connect to the engine a previous image of this process detached; False if it
        is gone (a new one is started instead)."""
        named = engine_link.adopted(adopt)
        if named is None:
            log.warning("engine.adopt_invalid", value=adopt[:200])
            return False
        process, authkey, address = named
        connection = connect(address, authkey, process, 10)
        kind, value = "gone", (0, 0)
        if connection is not None:
            with contextlib.suppress(EOFError, OSError):
                if connection.poll(30):
                    kind, _, value = connection.recv()
        if connection is None or kind != "started":
            log.warning("engine.adopt_failed", pid=process.pid, alive=process.is_alive())
            process.kill()  # a child that will not answer still holds GPU memory
            process.join(30)
            return False
        self.served_before = value[1]
        atexit.register(self.close)
        self._attach(process, connection, address, authkey)
        log.info("engine.process_adopted", model=self.info.id, role=self.role, pid=process.pid,
                 served=self.served_before)
        self._launch_standby()
        return True

    def _attach(self, process: Any, connection: Connection, address: str,
                authkey: bytes) -> None:
        self._process, self._connection = process, connection
        self._address, self._authkey = address, authkey
        self._receiver = threading.Thread(target=self._receive, args=(process, connection),
                                          name="engine-process-results", daemon=True)
        self._receiver.start()

    def _receive(self, process: Any, results: Connection) -> None:
        """Hand the child's messages to their calls until it closes the connection (the
        only thread that reads or closes it)."""
        try:
            self._read(results)
        finally:
            results.close()
        with self._lock:
            if self._detached is results:  # the engine goes on for this process's next image
                return
            lost = list(self._calls.values())
            self._calls.clear()
        with self._reaping:
            process.join(5)
            exitcode = process.exitcode
        if exitcode is not None:
            shutil.rmtree(Path(self._address).parent, ignore_errors=True)
        if lost or exitcode != 0:  # (a child that close() stopped exits with 0)
            (log.error if lost else log.warning)(
                "engine.process_exited", model=self.info.id, role=self.role,
                exitcode=exitcode, requests_failed=len(lost))
        for call in lost:
            call.future.set_exception(EngineProcessError(
                f"engine process exited ({exitcode}) with the request in flight"))
        if exitcode not in (0, None, -signal.SIGTERM, -signal.SIGINT):  # a crash, not a stop
            threading.Thread(target=self._restart, name="engine-restart", daemon=True).start()

    def _restart(self) -> None:
        """Start a child again after the last one crashed, without waiting for a request
        to ask (from the standby, when there is one)."""
        try:
            self._start(after_exit=True)
        except Exception:  # the next request tries again, and fails with the reason
            log.exception("engine.restart_failed", model=self.info.id, role=self.role)

    def _read(self, results: Connection) -> None:
        while True:
            try:
                kind, call_id, value = results.recv()
            except (EOFError, OSError):
                break
            if kind == "chunk":
                call = self._calls.get(call_id)
                if call is not None and call.chunks is not None:
                    call.chunks(value)
                continue
            call = self._calls.pop(call_id, None)
            if call is None:
                continue
            if kind == "done":
                call.future.set_result(value)
            else:
                call.future.set_exception(value)

    def close(self) -> None:
        """Stop the engine and its child (worker shutdown), and the standby."""
        with self._lock:
            process, connection, self._process, self._connection = \
                self._process, self._connection, None, None
            standby, self._standby = self._standby, None
            self._closed = True
        if standby is not None:
            engine_link.stop(standby)
        if process is None or connection is None:
            return
        with contextlib.suppress(OSError):
            connection.send(None)
        with self._reaping:
            process.join(180)
            if process.is_alive():
                process.kill()
                process.join(10)
            exitcode = process.exitcode
        shutil.rmtree(Path(self._address).parent, ignore_errors=True)
        log.info("engine.process_stopped", model=self.info.id, role=self.role, exitcode=exitcode)

    def detach(self) -> None:
        """Leave the engine running for this process's next image (a recycle's exec): it
        adopts it through ADOPT_ENV. Requests still in flight here fail."""
        with self._lock:
            process, connection, self._process, self._connection = \
                self._process, self._connection, None, None
            lost = list(self._calls.values())
            self._calls.clear()
            self._detached = connection
            standby, self._standby = self._standby, None
            self._closed = True
        if standby is not None:  # the next image starts its own once it has adopted
            engine_link.stop(standby)
        if process is None or connection is None:
            return
        try:
            connection.send(DETACH)
        except OSError:
            return  # the child is gone: the next image starts a new one
        if self._receiver is not None:  # the child closes its end once it has detached
            self._receiver.join(60)
        os.environ[self._adopt_env] = engine_link.adoption(process.pid, self._authkey,
                                                            self._address)
        for call in lost:
            call.future.set_exception(EngineProcessError("the worker is recycling"))
        log.info("engine.process_detached", model=self.info.id, role=self.role, pid=process.pid,
                 requests_failed=len(lost))

    def submit(self, request: SpeechRequest, kind: OutputKind,
               on_chunk: Callable[[Audio], None] | None = None) -> concurrent.futures.Future[Audio]:
        """Send one request to the child; the future resolves with its audio."""
        self.start()
        reference = self._references(request.voice)  # storage reads stay in this process
        slots = slots_for(request, self._slots)
        slots.acquire()
        call_id, call = next(self._ids), _Call(on_chunk)
        call.future.add_done_callback(lambda _: slots.release())
        with self._lock:
            self._calls[call_id] = call
            try:
                if self._connection is None:
                    raise EngineProcessError("engine process is not running")
                self._connection.send((call_id, request, reference, kind))
            except (OSError, EngineProcessError) as error:
                self._calls.pop(call_id, None)
                call.future.set_exception(EngineProcessError(str(error)))
        return call.future

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        """Speak every request; all of them run on the GPU at once."""
        futures = [self.submit(r, OutputKind.FINAL_ONLY) for r in requests]
        return [f.result() for f in futures]

    def stream(self, request: SpeechRequest) -> Iterator[Audio]:
        """Yield audio chunks as the engine makes them."""
        chunks: queue.SimpleQueue[Audio] = queue.SimpleQueue()
        return drain(self.submit(request, OutputKind.DELTA, chunks.put), chunks)
