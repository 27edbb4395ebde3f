"""The engine trace (workers/engines/trace.py) and its report (bench/engine_trace.py)."""

import json
import threading
from pathlib import Path

import pytest

from bench.engine_trace import breakdown, load, report
from workers.engines import trace
from workers.engines.vllm_omni import STAGE1_SCHEDULER, TALKER_SCHEDULER, stage_overrides
from workers.tuning import tuning


class Environment:
    """Set or unset a variable and read the engine tuning again, as a new process would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def set(self, name: str, value: str | None) -> None:
        if value is None:
            self.monkeypatch.delenv(name, raising=False)
        else:
            self.monkeypatch.setenv(name, value)
        tuning.cache_clear()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Environment:
    return Environment(monkeypatch)


def test_off_by_default_and_whole_lines_from_many_threads(tmp_path: Path,
                                                          env: Environment) -> None:
    env.set("NARRATOR_ENGINE_TRACE", None)
    trace.event("submit", rid="x")  # off: nothing written, nothing raised
    assert not trace.enabled()
    path = tmp_path / "trace.jsonl"
    env.set("NARRATOR_ENGINE_TRACE", str(path))

    def write(n: int) -> None:
        for i in range(200):
            trace.event("c2w_step", tokens=i, rt=[f"narrator-rt-{n}-{i}" * 8])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 1600
    assert {json.loads(line)["ev"] for line in lines} == {"c2w_step"}


def test_the_report_splits_first_audio_into_its_stages(tmp_path: Path) -> None:
    rid = "narrator-rt-say-3-0-ab12cd34"
    t = 1000.0
    events = [
        {"t": t, "ev": "submit", "rid": rid},
        {"t": t + 0.040, "ev": "talker_step", "admitted": [f"{rid}-x1"]},
        {"t": t + 0.060, "ev": "talker_frame", "rid": rid, "frames": 1},
        {"t": t + 0.070, "ev": "c2w_step", "tokens": 8000, "requests": 2, "rt": []},
        {"t": t + 0.071, "ev": "c2w_ready", "rid": f"{rid}-x2", "tokens": 16},
        {"t": t + 0.095, "ev": "talker_frame", "rid": rid, "frames": 2},
        {"t": t + 0.100, "ev": "c2w_step", "tokens": 4016, "requests": 2, "rt": [f"{rid}-x2"]},
        {"t": t + 0.110, "ev": "c2w_out", "rt": [f"{rid}-x2"]},
        {"t": t + 0.115, "ev": "first_audio", "rid": rid},
        {"t": t + 0.2, "ev": "submit", "rid": "narrator-rt-lost"},  # never answered: no row
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in reversed(events)))
    [row] = breakdown(load([str(path)]))
    assert row == {"rid": rid, "admit": 40.0, "frame1": 60.0, "step": 35.0, "to_c2w": 11.0,
                   "c2w_wait": 29.0, "c2w_run": 10.0, "back": 5.0, "total": 115.0}
    table = report([str(path)])
    assert "1 realtime requests" in table
    assert "Code2Wav: 2 steps; period median 30.0 ms" in table


def test_the_talker_scheduler_runs_only_when_traced_or_holding(env: Environment) -> None:
    env.set("NARRATOR_ENGINE_TRACE", None)
    env.set("NARRATOR_TALKER_ADMIT_LEAST", None)
    assert stage_overrides() == {"1": {"scheduler_cls": STAGE1_SCHEDULER}}
    both = {"0": {"scheduler_cls": TALKER_SCHEDULER}, "1": {"scheduler_cls": STAGE1_SCHEDULER}}
    env.set("NARRATOR_TALKER_ADMIT_LEAST", "16")
    assert stage_overrides() == both
    env.set("NARRATOR_TALKER_ADMIT_LEAST", None)
    env.set("NARRATOR_ENGINE_TRACE", "/dev/null")
    assert stage_overrides() == both


def test_the_report_compares_talker_steps_that_admit_with_decode_only_ones(
        tmp_path: Path) -> None:
    events, t = [], 1000.0
    for step in range(40):  # every fourth step admits a segment and takes 60 ms, others 30
        new = 1 if step % 4 == 0 else 0
        events.append({"t": t, "pid": 7, "ev": "talker_step", "admitted": [], "new": new,
                       "requests": 64, "tokens": 64 + 100 * new, "waiting": 0})
        t += 0.060 if new else 0.030
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    table = report([str(path)])
    assert "Talker: 40 steps, 10 admitting new requests (25%)" in table
    assert "60.0 ms after an admitting step, 30.0 ms after a decode-only one" in table
