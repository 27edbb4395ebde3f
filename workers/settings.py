"""Worker settings: the core ones plus engine tuning, text and audio choices."""

from functools import lru_cache

from core.settings import CoreSettings


class WorkerSettings(CoreSettings):
    """Settings only Celery workers read."""

    worker_queues: str = ""  # set by `narrator worker` (--queues); published in the registry
    segment_max_attempts: int = 3
    retry_backoff_seconds: float = 5.0  # a lost segment waits this, then 2x, 4x... (cap 600)
    assembly_max_attempts: int = 6  # storage unreachable this often: the job fails
    quality_retries: int = 2  # re-syntheses of a runaway, truncated or misheard segment
    normalize_text: bool = True  # numbers, dates, money, abbreviations read as words
    loudness_lufs: float = -16.0  # assembly normalises each part to this; 0 turns it off
    # Threads one assembly reads, finishes and (MP3) encodes parts on; 0: one per core.
    assembly_threads: int = 0
    # Subtitle cues from word times: jobs that ask for subtitles (English) have each finished
    # segment force-aligned on a CPU worker (PocketSphinx); false: cues are estimated.
    align_words: bool = True
    align_processes: int = 0  # processes a CPU worker aligns in at once; 0: half its cores
    # ALIGNER=qwen3 (core settings): Qwen3-ForcedAligner through vLLM on this worker's GPU,
    # from this checkpoint.
    aligner_model: str = ""
    aligner_gpu_memory: float = 0.3  # the share of the GPU vLLM takes for the aligner
    aligner_batch: int = 32  # segments the GPU aligns in one forward pass, at most
    # RECOGNIZER=qwen3 (core settings): Qwen3-ASR through vLLM on this worker's GPU hears
    # segments for `verify`, from this checkpoint.
    recognizer_model: str = ""
    recognizer_gpu_memory: float = 0.2
    recognizer_batch: int = 32  # segments heard in one batch, at most
    # verify "flag": a segment whose word error rate (what the recogniser heard against its
    # text) is more than this above its job's median is flagged in the manifest and the job.
    verify_wer_margin: float = 0.3
    # Liveness: each worker beats every WORKER_HEARTBEAT_SECONDS; one silent for
    # WORKER_DEAD_SECONDS is dead, and the reaper (every REAPER_INTERVAL_SECONDS, in every
    # worker) hands its running segments on, however long segments take.
    worker_heartbeat_seconds: float = 5.0
    worker_dead_seconds: float = 20.0
    reaper_interval_seconds: float = 10.0
    # Work whose message may have been lost (pending segments, unplanned or unassembled jobs)
    # untouched this long is enqueued again; it no longer decides when a dead worker's
    # segments move on.
    segment_stale_seconds: float = 900.0
    # On SIGTERM a worker stops taking work and finishes what it holds; what is still
    # running after this many seconds is handed back to the queue at once and the worker
    # exits. Keep it under the supervisor's own limit (Kubernetes' terminationGracePeriod,
    # 30 s by default; compose's stop_grace_period, 2 and 5 minutes in docker-compose.yml).
    worker_shutdown_grace_seconds: float = 25.0
    # Recycling (workers/runtime/recycle.py): past this many tasks or this resident size (MiB) of
    # the worker's own process, it stops as on SIGTERM and starts itself again; 0: never.
    # The RSS limit is about 4x a Piper worker's steady state (450-470 MiB in the soak).
    # A GPU worker's engine child outlives the recycle (the new image adopts it, warm), and
    # is not counted: its memory is vLLM's own (see the README). SIGHUP recycles at once.
    worker_max_tasks: int = 0
    worker_max_rss_mb: float = 2048.0
    metrics_port: int = 0  # a worker serves /metrics here (0: only through the API's)
    # A file the worker creates once its engine is warm and it consumes, and removes as it
    # stops: a readiness probe tests for it (the Helm chart: `test -f`). Empty: none.
    ready_file: str = ""
    # vLLM-Omni (NARRATOR_ENGINE=vllm-omni)
    vllm_deploy_config: str = ""
    vllm_max_in_flight: int = 64
    # Worker threads; 0: the in-flight bound on vLLM-Omni (narrator.cli.worker says why), one
    # per core on Piper and on workers with no engine.
    worker_threads: int = 0
    # A worker that runs no engine (`--queues assembly`) starts a process per this many
    # cores (narrator.cli.worker says why): 4 of 8 threads on a 32-core GPU host, 1 below 16.
    assembly_cores_per_process: int = 8
    # Threads only sync speech uses (the realtime lane); 0: on vLLM-Omni one per sequence
    # its deploy config keeps above VLLM_MAX_IN_FLIGHT (VLLM_REALTIME_SEQUENCES, 16): a
    # lane thread only waits on the engine, and a request queued at the lane waits first
    # come, first served for a whole answer to end, where one in the engine goes first
    # (priority) into the next slot any sequence frees. 1 on Piper (ONNX Runtime uses every
    # core).
    realtime_threads: int = 0
    # A sync request's sentences are spoken in at most this many pieces at once, joined with
    # SENTENCE_GAP_SECONDS: a 20 s answer then takes what its longest piece takes, not what
    # all of it takes one frame per engine step. 0: 4 on vLLM-Omni, 1 (never split) on Piper,
    # which speaks one request at a time.
    sync_pieces: int = 0
    vllm_stage_init_timeout: int = 900
    # The engine's two stage processes (talker, Code2Wav) under a CUDA MPS daemon of the
    # engine's own, so they share the GPU at once rather than in turns (workers/engines/mps.py).
    # Off by default: raw AsyncOmni made 8.7 % more with it, but the one product run with it
    # made 0.89 of the bare engine against 1.35 for the last run without (README, On the H100).
    vllm_mps: bool = False
    # The stage processes forked from a forkserver that imported vLLM-Omni once, beside the
    # engine's own import, instead of spawned to import it one after the other
    # (workers/engines/forkserver.py): a warm restart took 92 s with it, 153 s without (H100).
    vllm_forkserver: bool = True
    vllm_priority: bool = True
    vllm_warmup_batch: int = 0  # requests in the warm-up batch; 0: VLLM_MAX_IN_FLIGHT
    # Sequences the deploy config keeps above VLLM_MAX_IN_FLIGHT for sync speech (its
    # max_num_seqs minus the batch's); the warm-up runs that many streamed requests beside
    # its batch, so every batch size up to max_num_seqs has run before the first request.
    vllm_realtime_sequences: int = 16
    # Frames per warm-up request: 100 (8 s) runs every Code2Wav window shape, with its
    # 72-frame left context, at least once. On two H200s a restart with it was
    # ready in 88.2 s against 90.5 s with 250 frames (warm-up 5.0 s against 10.0 s), and the
    # first job after it ran at 159.4 audio-s/s against 149.6: not slower.
    vllm_warmup_tokens: int = 100
    # The engine in a child process of its own, away from the worker's GIL (bench.gpu_engine).
    vllm_engine_process: bool = True
    # The realtime partition (workers/runtime/partition.py): a second, small engine of the same
    # checkpoint on the same GPU, started once the batch engine is warm, that serves only
    # the realtime lane (sync and streamed speech), so a realtime request's engine steps
    # never carry batch segments. Until it is warm, or if it fails, the lane uses the batch
    # engine as before. Needs VLLM_ENGINE_PROCESS and a worker that consumes realtime
    # queues; its deploy config is VLLM_REALTIME_DEPLOY_CONFIG (default
    # workers/engines/deploy/qwen3_tts_realtime.yaml: 16 sequences, 0.25 of the GPU).
    vllm_realtime_engine: bool = True
    vllm_realtime_deploy_config: str = ""
    cache_dir: str = ""
    result_ttl_hours: float = 0.0
    # Parts stay after a job completes, so a re-render synthesises only what it changes
    # (storage: 32-bit float WAV, about 96 kB per second of speech at 24 kHz, until the job's
    # media is deleted); false: deleted at completion, and re-renders are refused.
    keep_parts: bool = True

    @property
    def realtime_lane_threads(self) -> int:
        """Return the realtime lane's thread count."""
        if self.realtime_threads:
            return self.realtime_threads
        return 1 if self.engine == "piper" else self.vllm_realtime_sequences

    @property
    def sync_piece_limit(self) -> int:
        """Return how many pieces a sync request is spoken in at most."""
        return self.sync_pieces or (1 if self.engine == "piper" else 4)


@lru_cache
def get_settings() -> WorkerSettings:
    """Return the process-wide worker settings."""
    return WorkerSettings()
