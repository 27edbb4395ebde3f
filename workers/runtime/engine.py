"""The worker's engine: built once per process from the settings, with the worker's wiring.

Here, not in workers/engines/, because building one reaches the database and storage (the
reference clips of uploaded voices): the engines themselves never do.
"""

import functools
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import structlog

from core.catalog import Qwen3Config, catalog, resolve_model_dir
from workers.engines import Engine
from workers.runtime.partition import Partition
from workers.settings import get_settings
from workers.voices import load_reference

if TYPE_CHECKING:
    from workers.engines.vllm_omni import VllmOmniEngine

log = structlog.get_logger()
_LOADING = threading.Lock()
_partition: Partition | None = None  # set once, by the worker's start (start_partition)


def get_engine() -> Engine:
    """Return the process's engine, loading it on first use.

    One thread loads it while the others wait: lru_cache alone would let two threads that
    ask at once each build an engine (two vLLM-Omni engines on one GPU).
    """
    with _LOADING:
        return _load()


def loaded_engine() -> Engine | None:
    """Return the engine if it has been loaded, else None (never loads it)."""
    with _LOADING:
        return _load() if _load.cache_info().currsize else None


def start_early() -> None:
    """Start the engine's child process in the background now, where the engine runs in one
    (vLLM-Omni, VLLM_ENGINE_PROCESS): the worker's start then finds it importing vLLM-Omni
    or starting its stages, not yet to begin. Elsewhere it does nothing."""
    settings = get_settings()
    if settings.engine == "vllm-omni" and settings.vllm_engine_process:
        from workers.engines.engine_process import EngineProcess

        engine = get_engine()
        if isinstance(engine, EngineProcess):
            engine.start_early()
            log.info("engine.early_start")


def reset_engine() -> None:
    """Forget the loaded engine (tests and benchmarks that change the settings)."""
    global _partition
    with _LOADING:
        _load.cache_clear()
        _partition = None


@lru_cache
def _load() -> Engine:
    settings = get_settings()
    info = catalog(settings)[0]
    if info.engine == "piper":
        from workers.engines.piper import PiperEngine

        return PiperEngine(info, sentence_gap=settings.sentence_gap_seconds)
    if info.engine == "kokoro":
        from workers.engines.kokoro import KokoroEngine

        return KokoroEngine(info, sentence_gap=settings.sentence_gap_seconds)
    if info.engine == "vllm-omni":
        if not settings.vllm_engine_process:
            return vllm_from_settings()
        from workers.engines.engine_process import EngineProcess

        config = Qwen3Config.load(resolve_model_dir(settings.model))
        return EngineProcess(info, vllm_from_settings, sample_rate=config.sample_rate,
                             max_in_flight=settings.vllm_max_in_flight,
                             references=load_reference if config.task_type == "Base" else None,
                             start_timeout=settings.vllm_stage_init_timeout * 2,
                             standby=settings.vllm_standby)
    raise ValueError(f"no engine for {info.engine!r}")


def vllm_from_settings(realtime: bool = False) -> "VllmOmniEngine":
    """Build the engine NARRATOR_* settings describe (in the worker, or in its engine process);
    `realtime`: the realtime partition's (workers/runtime/partition.py); under VLLM_MPS its
    kernels run at normal priority, the batch engine's below it."""
    from workers.engines.vllm_omni import DEPLOY_DIR, VllmOmniEngine, cache_environment

    settings = get_settings()
    cache_environment(settings.cache_dir)
    if realtime:
        deploy = settings.vllm_realtime_deploy_config or \
            str(DEPLOY_DIR / "qwen3_tts_realtime.yaml")
    else:
        deploy = settings.vllm_deploy_config or str(DEPLOY_DIR / "qwen3_tts_narrator.yaml")
    return VllmOmniEngine(
        catalog(settings)[0], Qwen3Config.load(resolve_model_dir(settings.model)),
        max_in_flight=settings.vllm_realtime_sequences if realtime
        else settings.vllm_max_in_flight, priority=settings.vllm_priority,
        references=load_reference, deploy_config="" if deploy == "default" else deploy,
        stage_init_timeout=settings.vllm_stage_init_timeout,
        use_mps=settings.vllm_mps, mps_background=not realtime,
        use_forkserver=settings.vllm_forkserver)


def start_partition(warm: Callable[[Engine], None],
                    on_change: Callable[[], None]) -> Partition | None:
    """Start the realtime partition in the background (VLLM_REALTIME_ENGINE), if this
    worker's engine has one: vLLM-Omni in an engine process. Return it, or None."""
    global _partition
    settings = get_settings()
    batch = get_engine()
    if not (settings.vllm_realtime_engine and settings.vllm_engine_process
            and batch.info.engine == "vllm-omni"):
        return None
    from workers.engines.engine_process import EngineProcess

    config = Qwen3Config.load(resolve_model_dir(settings.model))
    realtime = EngineProcess(
        batch.info, functools.partial(vllm_from_settings, True),
        sample_rate=config.sample_rate, max_in_flight=settings.vllm_realtime_sequences,
        references=load_reference if config.task_type == "Base" else None,
        start_timeout=settings.vllm_stage_init_timeout * 2, role="realtime",
        standby=settings.vllm_standby)
    _partition = Partition(batch, realtime, warm, on_change)
    _partition.start()
    return _partition


def realtime_engine() -> Engine:
    """Return the engine sync and streamed speech go to: the realtime partition's once it
    is warm, else the batch engine."""
    partition = _partition
    return partition.engine() if partition is not None else get_engine()


def partition() -> Partition | None:
    """Return this worker's realtime partition, if it has one."""
    return _partition
