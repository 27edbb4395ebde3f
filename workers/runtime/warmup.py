"""The engine's warm-up: every shape of work once, before a worker takes any."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import structlog

from workers.engines import Engine, SpeechRequest
from workers.settings import WorkerSettings

log = structlog.get_logger()


def warm_up(engine: Engine, settings: WorkerSettings) -> None:
    """Run the engine through the shapes a job and sync speech use, before taking work.

    On vLLM-Omni: a full batch (VLLM_WARMUP_BATCH, default the in-flight bound) of whole
    requests through both stages at segment length, and at the same time
    VLLM_REALTIME_SEQUENCES streamed realtime requests, so the engine meets every batch size
    up to its deploy config's max_num_seqs before the first job does. On the H100, the first
    realtime requests beside a full batch met a Triton compile (392 ms to first audio)
    when the warm-up stopped at the batch.
    """
    voice = engine.info.voices[0].id if engine.info.voices else ""
    if not voice:
        engine.start()
        return
    if engine.info.engine != "vllm-omni":
        engine.synthesize([SpeechRequest(text="Ready.", voice=voice)])
        return
    engine.start()
    if served := getattr(engine, "served_before", 0):  # a recycle adopted a warm engine
        log.info("engine.warm_up_skipped", served=served)
        return
    _warm(engine, settings, settings.vllm_warmup_batch or settings.vllm_max_in_flight,
          realtime=False)


def warm_up_realtime(engine: Engine, settings: WorkerSettings) -> None:
    """Warm the realtime partition (workers/runtime/partition.py): VLLM_REALTIME_SEQUENCES whole
    answers and as many streamed ones at once, every batch size its deploy config has."""
    if served := getattr(engine, "served_before", 0):  # a recycle adopted it, warm
        log.info("engine.warm_up_skipped", served=served, partition="realtime")
        return
    _warm(engine, settings, settings.vllm_realtime_sequences, realtime=True)


def _warm(engine: Engine, settings: WorkerSettings, batch: int, realtime: bool) -> None:
    """Run `batch` whole requests and VLLM_REALTIME_SEQUENCES streamed ones at once."""
    voice = engine.info.voices[0].id
    request = SpeechRequest(text=WARM_UP_TEXT, voice=voice,
                            max_new_tokens=settings.vllm_warmup_tokens, realtime=realtime)
    streams = settings.vllm_realtime_sequences
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1 + streams, thread_name_prefix="warm-up") as pool:
        whole = pool.submit(engine.synthesize, [replace(request, request_id=f"warm-up-{n}")
                                                for n in range(batch)])
        streamed = [pool.submit(lambda n: list(engine.stream(replace(
            request, request_id=f"warm-up-stream-{n}", realtime=True))), n)
            for n in range(streams)]
        for future in [whole, *streamed]:
            future.result()
    log.info("engine.warmed_up", batch=batch, streams=streams, realtime=realtime,
             frames=settings.vllm_warmup_tokens, seconds=round(time.perf_counter() - started, 1))


WARM_UP_TEXT = ("The warm-up runs every shape of work once, so that the first job after a "
                "start runs as fast as the ones after it.")
