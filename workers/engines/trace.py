"""Opt-in timestamps along a realtime request's path through vLLM-Omni (benchmarks only).

With `NARRATOR_ENGINE_TRACE` set to a file path, the adapter (submit, first audio), the
talker's hand-off (each of a realtime request's first frames) and Code2Wav's scheduler
(chunk ready, step scheduled, step output) append one JSON line each to that file, with
wall-clock time, so that lines from the engine's separate stage processes line up.
`python -m bench.engine_trace FILE` turns them into a table of where first audio's time
goes. Unset (the default), every call returns at once and nothing is written.
"""

import json
import os
import threading
import time
from typing import Any

from workers.tuning import tuning

_lock = threading.Lock()
_fds: dict[str, int] = {}  # one descriptor per trace path


def enabled() -> bool:
    """Say whether tracing is on in this process."""
    return bool(tuning().engine_trace)


def event(name: str, **fields: Any) -> None:
    """Append one event line (a single write with O_APPEND: whole lines across processes)."""
    path = tuning().engine_trace
    if not path:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "ev": name, **fields},
                      default=str) + "\n"
    with _lock:
        if path not in _fds:
            _fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fds[path], line.encode())
