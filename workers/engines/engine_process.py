"""An engine served from a child process of its own, behind the same protocol.

vLLM-Omni's AsyncOmni runs its output loop in the process that created it. In a GPU worker
that process also runs Celery, SQLAlchemy and the part writes of up to 96 task threads under
one GIL. Here the engine lives in a spawned child whose only Python work is the engine; the
worker's threads send requests down a pipe and get audio back (a 20 s segment is 1.9 MB of
float32). bench.gpu_engine on an H100, one run: the worker went from 0.841 to 0.873 of raw
AsyncOmni's audio-s per wall-s.

The child is started on first use and started again after it dies; the requests it held fail
with EngineProcessError, so their tasks retry.
"""

import atexit
import concurrent.futures
import contextlib
import itertools
import multiprocessing
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import structlog

from core.catalog import ModelInfo
from core.logs import configure
from workers.engines import Audio, SpeechRequest, drain, slots_for
from workers.engines.qwen3_tts import OutputKind, Reference

log = structlog.get_logger()
Build = Callable[[], Any]  # picklable: it is called in the child to make the real engine
References = Callable[[str], Reference | None]


class EngineProcessError(RuntimeError):
    """The engine's process exited or could not start."""


class _Outbox:
    """The child's messages to the worker, realtime ones first.

    One pipe carries everything, and a batch segment's audio is 1.9 MB: when a wave of
    segments ends together, a streamed request's chunk queued behind 64 of them would wait
    for 120 MB to be pickled and read. Chunks and realtime answers jump that queue; the
    pipe itself then holds at most the one message being sent.
    """

    REALTIME, BATCH, LAST = 0, 1, 2

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._order = itertools.count()

    def put(self, message: tuple[str, int, Any] | None, rank: int) -> None:
        """Queue one message (None, ranked LAST, ends the sender)."""
        self._queue.put((rank, next(self._order), message))

    def send_all(self, results: Connection) -> None:
        """Send messages in rank order, then arrival order, until None."""
        while (message := self._queue.get()[2]) is not None:
            results.send(message)


def _serve(build: Build, requests: Connection, results: Connection) -> None:
    """Child: run the engine, take (call id, request, reference, kind) from the pipe."""
    configure()  # the worker's log format, in the worker's log (stderr is shared)
    log.info("engine.process_building")
    outbox = _Outbox()
    try:
        engine = build()
        engine.start()
    except BaseException as error:  # the parent reports why the start failed
        results.send(("failed", -1, _picklable(error)))
        return
    # One sender: the engine's loop never blocks on a full pipe.
    threading.Thread(target=outbox.send_all, args=(results,), name="engine-results",
                     daemon=True).start()
    outbox.put(("started", -1, engine.sample_rate), outbox.REALTIME)

    def finished(call: int, rank: int, future: concurrent.futures.Future[Audio]) -> None:
        error = future.exception()
        outbox.put(("error", call, _picklable(error)) if error else
                   ("done", call, future.result()), rank)

    while (message := _receive_or_none(requests)) is not None:
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
    engine.close()
    outbox.put(None, outbox.LAST)


def _chunks_to(outbox: _Outbox, call: int, request_id: str) -> Callable[[Audio], None]:
    """Return a streamed call's chunk callback; it logs how long the engine took to the
    first one (the worker logs the same seen from its side: the difference is the pipe)."""
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
    except EOFError:  # the worker is gone: free the GPU all the same
        return None


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
    except Exception:  # anything unpicklable travels as its text
        return EngineProcessError(repr(error))
    return error


class _Call:
    """One request in flight: its future, and its chunk queue when streamed."""

    def __init__(self, chunks: Callable[[Audio], None] | None) -> None:
        self.future: concurrent.futures.Future[Audio] = concurrent.futures.Future()
        self.chunks = chunks


class EngineProcess:
    """The engine protocol over an engine that runs in a child process."""

    def __init__(self, info: ModelInfo, build: Build, *, sample_rate: int,
                 max_in_flight: int = 64, references: References | None = None,
                 start_timeout: float = 1800) -> None:
        self.info = info
        self._build = build
        self._sample_rate = sample_rate
        self._references = references or (lambda _voice: None)
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._start_timeout = start_timeout
        self._lock = threading.Lock()  # starts, stops and sends
        # One thread at a time waits on the child: two waitpid() calls race, and the loser
        # sees a child that is gone as still alive.
        self._reaping = threading.Lock()
        self._process: Any = None
        self._requests: Connection | None = None
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()

    @property
    def sample_rate(self) -> int:
        """Return the model's sample rate."""
        return self._sample_rate

    def start(self) -> None:
        """Start the child and its engine, once; again if it has died."""
        with self._lock:
            if self._process is not None:
                with self._reaping:
                    if self._process.is_alive():
                        return
            context = multiprocessing.get_context("spawn")  # never fork a CUDA parent
            requests_out, requests_in = context.Pipe(duplex=False)
            results_out, results_in = context.Pipe(duplex=False)
            process = context.Process(target=_serve, name=f"engine-{self.info.id}",
                                      args=(self._build, requests_out, results_in))
            process.start()
            requests_out.close()
            results_in.close()
            if not results_out.poll(self._start_timeout):
                process.kill()
                raise EngineProcessError(f"engine did not start in {self._start_timeout:.0f} s")
            try:
                kind, _, value = results_out.recv()
            except EOFError:
                kind, value = "failed", EngineProcessError(f"exit code {process.exitcode}")
            if kind != "started":
                process.join(30)
                raise EngineProcessError(f"engine failed to start: {value!r}") from value
            self._process, self._requests = process, requests_in
            atexit.register(self.close)  # before multiprocessing joins its children at exit
            threading.Thread(target=self._receive, args=(process, results_out),
                             name="engine-process-results", daemon=True).start()
            log.info("engine.process_started", model=self.info.id, pid=process.pid)

    def _receive(self, process: Any, results: Connection) -> None:
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
        with self._reaping:
            process.join(5)
            exitcode = process.exitcode
        with self._lock:
            lost = list(self._calls.values())
            self._calls.clear()
        if lost:
            log.error("engine.process_exited", model=self.info.id, exitcode=exitcode,
                      requests_failed=len(lost))
        for call in lost:
            call.future.set_exception(EngineProcessError(
                f"engine process exited ({exitcode}) with the request in flight"))

    def close(self) -> None:
        """Stop the engine and its child (worker shutdown)."""
        with self._lock:
            process, requests, self._process, self._requests = \
                self._process, self._requests, None, None
        if process is None or requests is None:
            return
        with contextlib.suppress(OSError):
            requests.send(None)
        with self._reaping:
            process.join(180)
            if process.is_alive():
                process.kill()
                process.join(10)
            exitcode = process.exitcode
        log.info("engine.process_stopped", model=self.info.id, exitcode=exitcode)

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
                if self._requests is None:
                    raise EngineProcessError("engine process is not running")
                self._requests.send((call_id, request, reference, kind))
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
