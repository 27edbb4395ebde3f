"""The real vLLM-Omni engine on a GPU (skipped without CUDA; run on the lent H100).

    NARRATOR_TEST_GPU_MODEL=/tmp/m06 pytest -m gpu tests/test_gpu_engine.py
"""

import importlib.util
import os
import time

import numpy as np
import pytest

from workers.engines.engine_process import EngineProcess
from workers.runtime.partition import Partition

# A cold engine start captures CUDA graphs for minutes, and vLLM's imports warn.
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200), pytest.mark.filterwarnings("default")]


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("vllm_omni") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda() or not os.environ.get("NARRATOR_TEST_GPU_MODEL"),
                    reason="needs CUDA, vLLM-Omni and NARRATOR_TEST_GPU_MODEL")
def test_real_engine_synthesizes_batches_and_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NARRATOR_ENGINE", "vllm-omni")
    monkeypatch.setenv("NARRATOR_MODEL", os.environ["NARRATOR_TEST_GPU_MODEL"])
    from workers.runtime.engine import get_engine

    engine = get_engine()
    assert isinstance(engine, EngineProcess)  # the worker's default: AsyncOmni in a child
    partition = None
    try:
        _check(engine)
        partition = _check_partition(engine)
    finally:
        if partition is not None:
            partition.realtime.close()  # type: ignore[attr-defined]
        engine.close()  # else the engine's processes keep the interpreter alive


def _check_partition(engine: EngineProcess) -> Partition:
    """The default realtime partition starts beside the running batch engine on the same
    GPU (its deploy config's memory shares fit), and streams while the batch engine works."""
    from concurrent.futures import ThreadPoolExecutor

    from workers.engines import SpeechRequest
    from workers.runtime.engine import realtime_engine, start_partition

    partition = start_partition(lambda _engine: None, lambda: None)
    assert partition is not None
    partition.join(900)
    assert partition.state == "ready", partition.reason
    assert realtime_engine() is engine  # the batch engine is idle: it answers first
    voice = engine.info.voices[0].id
    with ThreadPoolExecutor(1) as pool:
        batch = pool.submit(engine.synthesize, [SpeechRequest(
            text=f"Batch {i}.", voice=voice, max_new_tokens=100) for i in range(32)])
        while not engine.batch_in_flight:
            time.sleep(0.01)
        assert realtime_engine() is partition.realtime  # the batch engine is busy
        chunks = list(partition.realtime.stream(SpeechRequest(
            text="Streamed beside a batch.", voice=voice, realtime=True, max_new_tokens=50)))
        assert len(batch.result()) == 32
    assert len(chunks) > 1
    return partition


def _check(engine: EngineProcess) -> None:
    from workers.engines import SpeechRequest
    from workers.engines.qwen3_tts import SAMPLES_PER_FRAME

    voice = engine.info.voices[0].id
    requests = [SpeechRequest(text=f"Request number {i}.", voice=voice, max_new_tokens=25,
                              language="en") for i in range(4)]
    audio = engine.synthesize(requests)
    assert engine.sample_rate == 24000
    for clip in audio:
        assert 24 * SAMPLES_PER_FRAME <= len(clip) <= 26 * SAMPLES_PER_FRAME
        assert np.isfinite(clip).all()
    chunks = list(engine.stream(SpeechRequest(text="Streamed.", voice=voice, realtime=True,
                                              max_new_tokens=50)))
    assert len(chunks) > 1
    assert 49 * SAMPLES_PER_FRAME <= sum(len(c) for c in chunks) <= 51 * SAMPLES_PER_FRAME
