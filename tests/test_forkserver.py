"""The stage forkserver (workers/engines/forkserver.py): a process forked from it runs in the
environment its starter had when it started it, as a spawned stage process does."""

import os
import subprocess
from multiprocessing.process import BaseProcess

import pytest

from workers.engines import forkserver

CHECK = ["sh", "-c", 'test "$NARRATOR_STAGE_PROBE" = set-after-the-server-started']


@pytest.fixture(scope="module")
def context() -> forkserver.EnvironContext:
    return forkserver.start(["json"])


def _run(process: BaseProcess) -> int | None:
    process.start()
    process.join(60)
    return process.exitcode


def test_a_stage_process_sees_the_environment_set_after_the_forkserver_started(
        context: forkserver.EnvironContext, monkeypatch: pytest.MonkeyPatch) -> None:
    context.Process(target=int).start()  # the server is running before the change
    monkeypatch.setenv("NARRATOR_STAGE_PROBE", "set-after-the-server-started")
    assert _run(context.Process(target=subprocess.check_call, args=(CHECK,))) == 0


def test_a_plain_forkserver_process_would_not_see_it(
        context: forkserver.EnvironContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the environment is carried: the same check fails in a plain forkserver child."""
    context.Process(target=int).start()
    monkeypatch.setenv("NARRATOR_STAGE_PROBE", "set-after-the-server-started")
    plain = __import__("multiprocessing").get_context("forkserver")
    assert _run(plain.Process(target=subprocess.check_call, args=(CHECK,))) != 0
    assert os.environ["NARRATOR_STAGE_PROBE"] == "set-after-the-server-started"
