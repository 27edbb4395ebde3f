"""The engine in a child process of its own: the same protocol, across a real socket.

The child runs the real VllmOmniEngine over the CPU test double of AsyncOmni (FakeOmni: the
GPU engine boundary, as in test_vllm_omni_adapter.py); the process, the socket, the pickling,
the adoption across a recycle and the restart after a crash are real.
"""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.catalog import Qwen3Config, qwen3_model
from tests.doubles.omni import SCALE, FakeOmni, SlowOmni
from tests.test_vllm_omni_adapter import MODEL, assert_concurrent_requests_keep_their_own_audio
from workers.engines import SpeechRequest, engine_link
from workers.engines.engine_child import EngineProcessError
from workers.engines.engine_link import ADOPT_ENV
from workers.engines.engine_process import EngineProcess
from workers.engines.qwen3_tts import OutputKind
from workers.engines.vllm_omni import VllmOmniEngine


def build(slow: bool = False) -> VllmOmniEngine:
    """Run in the child: the real adapter over the test double."""
    fake = SlowOmni("chunks") if slow else FakeOmni("chunks")
    return VllmOmniEngine(qwen3_model(str(MODEL)), Qwen3Config.load(MODEL),
                          omni_factory=lambda: fake,
                          prompt_length=lambda info: 10 + len(info["text"][0]))


def build_slow() -> VllmOmniEngine:
    return build(slow=True)


def build_broken() -> VllmOmniEngine:
    raise RuntimeError("no GPU here")


def make(build_: Any = build, max_in_flight: int = 64) -> EngineProcess:
    return EngineProcess(qwen3_model(str(MODEL)), build_, sample_rate=24000,
                         max_in_flight=max_in_flight, start_timeout=60)


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    engine = make()
    yield engine
    engine.close()


def test_the_engine_runs_in_a_child_and_returns_whole_audio(engine: EngineProcess) -> None:
    audio = engine.synthesize([SpeechRequest(text="Hello there.", voice="ryan",
                                             max_new_tokens=60)])[0]
    assert len(audio) == 60 * SCALE
    assert audio.dtype == np.float32
    assert set(audio.tolist()) == {float(len("Hello there."))}
    assert engine._process.pid != os.getpid()
    assert engine._process.is_alive()


def test_streamed_chunks_arrive_in_order(engine: EngineProcess) -> None:
    chunks = list(engine.stream(SpeechRequest(text="Hi.", voice="ryan", max_new_tokens=70,
                                              realtime=True)))
    assert [len(c) for c in chunks] == [250, 250, 200]


def test_concurrent_requests_keep_their_own_audio(engine: EngineProcess) -> None:
    assert_concurrent_requests_keep_their_own_audio(engine)


def test_an_engine_error_reaches_the_caller_as_itself(engine: EngineProcess) -> None:
    with pytest.raises(ValueError, match="not a speaker"):
        engine.synthesize([SpeechRequest(text="x", voice="nobody")])
    assert len(engine.synthesize([SpeechRequest(text="x", voice="ryan",
                                                max_new_tokens=5)])[0]) == 5 * SCALE


def test_a_crashed_engine_fails_its_requests_and_starts_again() -> None:
    engine = make(build_slow)
    try:
        engine.start()
        first = engine._process
        running = engine.submit(SpeechRequest(text="long", voice="ryan", max_new_tokens=2500),
                                OutputKind.FINAL_ONLY)
        time.sleep(0.5)
        os.kill(first.pid, signal.SIGKILL)
        with pytest.raises(EngineProcessError, match="exited"):
            running.result(timeout=30)
        audio = engine.synthesize([SpeechRequest(text="again", voice="ryan",
                                                 max_new_tokens=25)])[0]
        assert len(audio) == 25 * SCALE
        assert engine._process.pid != first.pid
        assert engine._slots._value == 64  # the lost request gave its slot back
    finally:
        engine.close()


def test_an_engine_that_cannot_start_says_why() -> None:
    engine = make(build_broken)
    with pytest.raises(EngineProcessError, match="no GPU here"):
        engine.start()


def test_an_early_start_runs_in_the_background_and_start_waits_for_it() -> None:
    engine = make()
    try:
        engine.start_early()  # returns at once: the child is spawned on another thread
        assert engine._early is not None
        assert not engine._early.done()
        engine.start()  # waits for that start, never spawns a second child
        first = engine._process
        assert first is not None
        assert first.is_alive()
        engine.start()
        assert engine._process is first
        assert len(engine.synthesize([SpeechRequest(text="Hi.", voice="ryan",
                                                    max_new_tokens=5)])[0]) == 5 * SCALE
    finally:
        engine.close()


def test_an_early_start_that_fails_fails_the_start_that_waits_for_it() -> None:
    engine = make(build_broken)
    engine.start_early()
    with pytest.raises(EngineProcessError, match="no GPU here"):
        engine.start()
    with pytest.raises(EngineProcessError, match="no GPU here"):
        engine.start()  # a later start tries again, and says why again


def test_close_stops_the_child() -> None:
    engine = make()
    engine.start()
    process = engine._process
    engine.close()
    assert not process.is_alive()
    assert process.exitcode == 0
    engine.close()  # twice: nothing left to stop


def test_realtime_messages_leave_the_child_before_queued_batch_audio() -> None:
    """A streamed chunk queued behind a wave of finished batch segments is sent first; each
    rank keeps its own order, and None ends the sender after everything queued."""
    import multiprocessing
    import threading

    from workers.engines.engine_child import Outbox as _Outbox

    outbox = _Outbox()
    for call in range(3):
        outbox.put(("done", call, np.zeros(500_000, dtype=np.float32)), outbox.BATCH)
    outbox.put(None, outbox.LAST)
    outbox.put(("chunk", 7, np.ones(10, dtype=np.float32)), outbox.REALTIME)
    outbox.put(("chunk", 7, np.full(10, 2.0, dtype=np.float32)), outbox.REALTIME)
    received, sent = multiprocessing.Pipe(duplex=False)
    sender = threading.Thread(target=outbox.send_all, args=(sent,))
    sender.start()
    order = [(kind, call, float(audio[0])) for kind, call, audio in
             (received.recv() for _ in range(5))]
    sender.join(10)
    assert order == [("chunk", 7, 1.0), ("chunk", 7, 2.0), ("done", 0, 0.0), ("done", 1, 0.0),
                     ("done", 2, 0.0)]
    assert not sender.is_alive()
    assert not received.poll(0.1)


def test_a_detached_engine_is_adopted_warm_by_the_next_image(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A recycle: the worker detaches from its engine's child and execs; the new image (here
    a new EngineProcess in the same process, as after exec) adopts the same child through
    ADOPT_ENV, learns it is warm, and its requests run there. A request still in flight at
    the detach fails (its task retries); closing the adopter stops the child."""
    monkeypatch.delenv(ADOPT_ENV, raising=False)
    first = make(build_slow)
    first.start()
    pid = first._process.pid
    assert len(first.synthesize([SpeechRequest(text="warm", voice="ryan",
                                               max_new_tokens=5)])[0]) == 5 * SCALE
    running = first.submit(SpeechRequest(text="long", voice="ryan", max_new_tokens=2500),
                           OutputKind.FINAL_ONLY)
    first.detach()
    with pytest.raises(EngineProcessError, match="recycling"):
        running.result(timeout=5)
    assert os.environ[ADOPT_ENV].startswith(f"{pid}:")
    second = make(build_slow)
    try:
        second.start()
        assert ADOPT_ENV not in os.environ  # taken once: a later restart starts a new child
        assert second._process.pid == pid
        assert second.served_before >= 1
        audio = second.synthesize([SpeechRequest(text="again", voice="ryan",
                                                 max_new_tokens=25)])[0]
        assert len(audio) == 25 * SCALE
        process = second._process
    finally:
        second.close()
    assert not process.is_alive()
    assert process.exitcode == 0
    assert not Path(second._address).parent.exists()  # its socket's folder is removed


def test_an_adoption_that_finds_no_engine_starts_a_new_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ADOPT_ENV, f"999999:{'00' * 32}:{tmp_path / 'gone.sock'}")
    engine = make()
    try:
        engine.start()
        assert engine._process.pid != 999999
        assert engine.served_before == 0  # a new engine: the worker warms it up
        assert len(engine.synthesize([SpeechRequest(text="x", voice="ryan",
                                                    max_new_tokens=5)])[0]) == 5 * SCALE
    finally:
        engine.close()


def test_a_detached_engine_nobody_adopts_stops_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """ADOPT_WAIT_SECONDS (600 s by default), shortened to 1 s: the mechanism; a recycled
    image that fails to come back does not leave the GPU held for ever."""
    monkeypatch.setattr(engine_link, "ADOPT_WAIT_SECONDS", 1.0)
    engine = make()
    engine.start()
    process = engine._process
    engine.detach()
    monkeypatch.delenv(ADOPT_ENV)
    process.join(30)
    assert process.exitcode == 0


def test_only_a_holder_of_the_key_can_adopt_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket lies in a folder only this user can enter, and a connection must also
    prove the key: a wrong one is turned away, and the worker's next image still adopts."""
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    monkeypatch.delenv(ADOPT_ENV, raising=False)
    engine = make()
    engine.start()
    address, pid = engine._address, engine._process.pid
    assert oct(Path(address).parent.stat().st_mode & 0o777) == "0o700"
    engine.detach()
    with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
        Client(address, family="AF_UNIX", authkey=b"wrong")
    again = make()
    try:
        again.start()
        assert again._process.pid == pid
        assert len(again.synthesize([SpeechRequest(text="x", voice="ryan",
                                                   max_new_tokens=5)])[0]) == 5 * SCALE
    finally:
        again.close()


def build_importing() -> VllmOmniEngine:
    """Run in the child: the adapter with its own factory, which imports vllm_omni (here the
    double in tests/doubles/site, which records each import and each engine it creates)."""
    return VllmOmniEngine(qwen3_model(str(MODEL)), Qwen3Config.load(MODEL),
                          prompt_length=lambda info: 10 + len(info["text"][0]))


@pytest.fixture
def omni_events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The double's vllm_omni on the children's path, recording into the file returned."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "doubles" / "site"))
    events = tmp_path / "events"
    events.touch()
    monkeypatch.setenv("NARRATOR_TEST_OMNI_EVENTS", str(events))
    monkeypatch.delenv(ADOPT_ENV, raising=False)
    return events


def wait_for_line(path: Path, line: str, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while line not in (lines := path.read_text().splitlines()):
        assert time.monotonic() < deadline, f"{line!r} never came: {lines}"
        time.sleep(0.05)
    return lines


def test_a_crashed_engine_restarts_from_its_standby_which_imported_beforehand(
        omni_events: Path) -> None:
    """The engine's child imports vLLM-Omni and starts it; a standby beside it imports and
    waits without starting an engine. When the engine's child is killed, the standby becomes
    the engine at once, before any request asks, without importing again, and a new standby
    is started behind it."""
    engine = EngineProcess(qwen3_model(str(MODEL)), build_importing, sample_rate=24000,
                           start_timeout=60, standby=True)
    try:
        engine.start()
        first = engine._process
        assert engine._standby is not None
        standby = engine._standby[0]
        before = wait_for_line(omni_events, f"import {standby.pid}")
        assert before == [f"import {first.pid}", f"engine {first.pid}", f"import {standby.pid}"]
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while engine._process is first or not engine.running:  # no request asks for it
            assert time.monotonic() < deadline, "the engine was not started again"
            time.sleep(0.05)
        audio = engine.synthesize([SpeechRequest(text="again", voice="ryan",
                                                 max_new_tokens=25)])[0]
        assert len(audio) == 25 * SCALE
        assert engine._process.pid == standby.pid
        assert engine._standby is not None
        second_standby = engine._standby[0]
        assert second_standby.pid not in (first.pid, standby.pid)
        after = wait_for_line(omni_events, f"import {second_standby.pid}")
        assert after[3:] == [f"engine {standby.pid}", f"import {second_standby.pid}"]
    finally:
        engine.close()
    assert not standby.is_alive()
    assert not second_standby.is_alive()


def test_a_detach_stops_the_standby_and_the_adopter_starts_its_own(omni_events: Path) -> None:
    first = EngineProcess(qwen3_model(str(MODEL)), build_importing, sample_rate=24000,
                          start_timeout=60, standby=True)
    first.start()
    assert first._standby is not None
    standby, pid = first._standby[0], first._process.pid
    first.detach()
    assert first._standby is None
    assert not standby.is_alive()
    second = EngineProcess(qwen3_model(str(MODEL)), build_importing, sample_rate=24000,
                           start_timeout=60, standby=True)
    try:
        second.start()
        assert second._process.pid == pid  # adopted
        assert second._standby is not None
        assert second._standby[0].is_alive()
    finally:
        second.close()


STANDBY_OWNER = """
import os, sys, time
from core.catalog import qwen3_model
from tests.test_engine_process import MODEL, build_importing
from workers.engines.engine_process import EngineProcess
engine = EngineProcess(qwen3_model(str(MODEL)), build_importing, sample_rate=24000,
                       start_timeout=60, standby=True)
engine.start()
print("pids", engine._process.pid, engine._standby[0].pid, flush=True)
time.sleep(600)
"""


def test_a_standby_whose_worker_is_killed_stops_itself(omni_events: Path) -> None:
    """A worker killed outright (SIGKILL: no close) leaves neither child behind: the engine's
    sees its connection close, the standby that its parent is gone."""
    import subprocess
    import sys

    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent / "doubles" / "site"), str(Path(__file__).parents[1])])}
    owner = subprocess.Popen([sys.executable, "-c", STANDBY_OWNER], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        line = ""
        while not line.startswith("pids "):  # the log goes to stdout too
            line = owner.stdout.readline()
            assert line, "the worker exited"
        engine_pid, standby_pid = map(int, line.split()[1:])
        wait_for_line(omni_events, f"import {standby_pid}")
    finally:
        owner.kill()
        owner.wait(10)
        if owner.stdout is not None:
            owner.stdout.close()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in (engine_pid, standby_pid)):
        assert time.monotonic() < deadline, "a child outlived its killed worker"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not reaped by init yet, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_an_engine_stopped_by_a_signal_is_not_started_again(omni_events: Path) -> None:
    """SIGTERM or SIGINT on the engine's child is a stop (the worker's process group is being
    stopped, as Ctrl-C does), not a crash: the worker does not start another behind it."""
    engine = EngineProcess(qwen3_model(str(MODEL)), build_importing, sample_rate=24000,
                           start_timeout=60, standby=True)
    try:
        engine.start()
        first = engine._process
        os.kill(first.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while engine.running:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # a restart would have begun by now (the double starts in ms)
        assert engine._process is first
        started = [line for line in omni_events.read_text().splitlines()
                   if line.startswith("engine ")]
        assert started == [f"engine {first.pid}"]
    finally:
        engine.close()
