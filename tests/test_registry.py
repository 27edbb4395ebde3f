"""Workers publish what they serve and whether they are warm; the API lists and reports it."""

import signal
import time
from pathlib import Path

from core.catalog import qwen3_model
from core.registry import FileRegistry, RedisRegistry, WorkerRecord
from tests.conftest import base_env, redis_url
from tests.support import Process, Stack, narrator, wait_for

MODEL = Path(__file__).parent / "data" / "qwen3-tts-0.6b-customvoice"


def test_readyz_counts_the_warm_worker(local_stack: Stack) -> None:
    with local_stack.client() as http:
        ready = http.get("/readyz").json()
    assert ready["workers"]["ready"] >= 1


def test_models_published_by_a_gpu_worker_are_listed(local_stack: Stack) -> None:
    registry = RedisRegistry(redis_url(11))
    record = WorkerRecord("gpu-host:1", "warming", ("batch",), (qwen3_model(str(MODEL)),),
                          time.time())
    registry.publish(record)
    try:
        time.sleep(2.1)  # the API caches the registry for two seconds
        with local_stack.client() as http:
            models = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
            voices = http.get("/v1/audio/voices").json()["voices"]
            ready = http.get("/readyz").json()
            bad = http.post("/v1/audio/jobs", json={"model": "qwen3-tts-0.6b-customvoice",
                                                    "voice": "nobody", "input": "Hi."})
        gpu = models["qwen3-tts-0.6b-customvoice"]
        assert gpu["engine"] == "vllm-omni"
        assert gpu["task_type"] == "CustomVoice"
        assert "English" in gpu["languages"]
        assert {"ryan", "vivian"} <= {v["id"] for v in voices
                                      if v["model"] == "qwen3-tts-0.6b-customvoice"}
        assert ready["workers"]["warming"] == 1
        assert bad.status_code == 400
        assert "ryan" in bad.json()["error"]["message"]
    finally:
        registry.remove(record.id)


def test_file_registry_forgets_stale_workers(tmp_path: Path) -> None:
    registry = FileRegistry(tmp_path)
    record = WorkerRecord("host:2", "ready", ("realtime",), (qwen3_model(str(MODEL)),),
                          time.time())
    registry.publish(record)
    assert registry.live() == [record]
    old = time.time() - 60
    for path in tmp_path.glob("*.json"):
        import os

        os.utime(path, (old, old))
    assert registry.live() == []


def test_a_worker_marks_itself_ready_for_a_probe_once_warm_and_unready_on_sigterm(
        tmp_path: Path, database_url: str) -> None:
    """READY_FILE (the Helm chart's readiness probe) exists from when the worker consumes
    until it is told to stop, and not before its engine is warm."""
    ready = tmp_path / "ready"
    ready.write_text("a previous run's")
    env = base_env(tmp_path, database_url, 7) | {"NARRATOR_READY_FILE": str(ready)}
    worker = Process(narrator("worker"), env, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: "engine.ready" in worker.output() or not ready.exists(), 60,
                 "the stale file to go")
        wait_for(ready.exists, 60, "the ready file")
        assert "engine.ready" in worker.output()
        assert worker.popen is not None
        worker.popen.send_signal(signal.SIGTERM)
        worker.popen.wait(30)
        assert not ready.exists()
    finally:
        worker.stop()
