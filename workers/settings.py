"""Worker settings: the core groups plus those only Celery workers read."""

import os
from functools import lru_cache

from pydantic_settings import BaseSettings

from core.catalog import CPU_ENGINES
from core.settings import CoreSettings
from models.settings import CONFIG
from workers.tuning import EngineTuning


class SynthesisSettings(BaseSettings):
    """Synthesis: how segments are spoken, retried and checked."""

    model_config = CONFIG

    segment_max_attempts: int = 3
    """Attempts per segment (engine errors, and workers lost while running it) before the
    segment and its job fail."""
    retry_backoff_seconds: float = 5.0
    """A segment whose worker was lost is enqueued again after this delay, doubled for each
    attempt (capped at 600 s); assemblies that cannot reach storage wait the same."""
    quality_retries: int = 2
    """Re-syntheses (a new seed each) of a segment whose length is implausible for its text:
    over 3x the expected length + 6 s (runaway), or under 0.3x (truncated); expected =
    characters x the job's measured seconds per character. Also the retakes of a misheard
    segment in a job with `verify: "retry"`."""
    normalize_text: bool = True
    """The engine is given the spoken form: numbers, ordinals, years, dates, times, money,
    percentages, phone numbers and common abbreviations as words (num2words; the rules
    beyond numbers are English). Subtitles keep the text as written."""
    sync_pieces: int = 0
    """A sync request's sentences are spoken at once in at most this many pieces, joined with
    SENTENCE_GAP_SECONDS: a 20 s answer then takes what its longest piece takes. With fewer
    sentences than pieces, a sentence over 84 characters is also cut after its commas,
    semicolons, colons and dashes. 0: 4 on vLLM-Omni, 1 (never split) on Piper, which speaks
    one request at a time."""


class AssemblySettings(BaseSettings):
    """Assembly: how finished segments become the job's files, and how long they are kept."""

    model_config = CONFIG

    assembly_max_attempts: int = 6
    """An assembly that cannot reach storage is retried after RETRY_BACKOFF_SECONDS,
    doubling; after this many attempts the job fails with `assembly_failed`."""
    loudness_lufs: float = -16.0
    """Every job part is normalised to this integrated loudness (pyloudnorm) with a soft
    limiter above 0.9; 0 turns it off. Sync speech is not normalised."""
    assembly_threads: int = 0
    """Threads one assembly (or one fragment) reads, normalises and, for MP3 and m4b,
    encodes parts on; 0: one per core. Where CPU workers share a host with a GPU worker, set
    it below the core count so the engine's own CPU threads keep theirs."""
    assembly_cores_per_process: int = 8
    """A worker that runs no engine (`narrator worker --queues assembly`, beside GPU
    workers) starts one process per this many cores (1 below 16 cores), each an ordinary
    worker with its own registry record: one process's threads share one GIL, and MP3
    fragments encode faster in several. `--processes N` sets the count for any worker."""
    keep_parts: bool = True
    """Each segment's part stays after its job completes, so a re-render synthesises only
    what it changes and reuses the rest (storage: 32-bit float WAV, about 88 kB per second
    of speech at 22.05 kHz, 96 kB at 24 kHz, until the job's media is deleted). false: parts
    are deleted at completion and a re-render is a 409 `parts_not_kept`."""
    result_ttl_hours: float = 0.0
    """Sets `expires_at` on completed jobs; the reaper then deletes their media and the job
    (fractions allowed). 0: kept."""


class AlignmentSettings(BaseSettings):
    """Alignment and checks: word times for subtitles, and the recognition check (`verify`).
    ALIGNER and RECOGNIZER (the models) are in Speech: the API reads them too."""

    model_config = CONFIG

    align_words: bool = True
    """Jobs that ask for `subtitles` (English) get word times: a Piper worker keeps the words
    its own phoneme durations place as it speaks; any other segment is force-aligned on a
    CPU worker (`narrator.align_segment` on the `assembly` queue), and the assembly aligns
    what is not aligned by then. false, or a failed alignment: cues are estimated. The
    manifest's `timing` counts each."""
    align_processes: int = 0
    """Child processes a CPU worker aligns in, each with its own PocketSphinx decoder (it
    holds the GIL while it decodes: one process aligns about 70 audio-seconds per second).
    0: half the cores, at least 1."""
    aligner_model: str = ""
    """With ALIGNER=qwen3: the Qwen3-ForcedAligner checkpoint's folder (nothing is fetched at
    run time)."""
    aligner_gpu_memory: float = 0.3
    """With ALIGNER=qwen3: the share of the GPU vLLM takes for the aligner; on a GPU that
    also runs the TTS engine, the two shares must fit together."""
    aligner_batch: int = 32
    """With ALIGNER=qwen3: segments aligned in one forward pass at most."""
    recognizer_model: str = ""
    """With RECOGNIZER=qwen3: the Qwen3-ASR checkpoint's folder (nothing is fetched at run
    time)."""
    recognizer_gpu_memory: float = 0.2
    """With RECOGNIZER=qwen3: the share of the GPU vLLM takes for it."""
    recognizer_batch: int = 32
    """With RECOGNIZER=qwen3: segments heard in one batch at most."""
    verify_wer_margin: float = 0.3
    """A job with `verify: "flag"` flags a segment whose word error rate (what the
    recogniser heard against its text) is more than this above the job's median."""


class LifecycleSettings(BaseSettings):
    """Worker lifecycle: threads, liveness, shutdown, recycling and readiness."""

    model_config = CONFIG

    worker_queues: str = ""
    """Set by `narrator worker --queues`; published in the worker registry."""
    worker_threads: int = 0
    """Threads of a worker's pool; 0: VLLM_MAX_IN_FLIGHT on vLLM-Omni (a thread per engine
    slot), one per core on Piper and on workers with no engine."""
    realtime_threads: int = 0
    """Threads of the worker's realtime lane, which only sync speech uses; 0: on vLLM-Omni
    VLLM_REALTIME_SEQUENCES (a lane thread only waits on the engine), 1 on Piper (ONNX
    Runtime uses every core)."""
    worker_heartbeat_seconds: float = 5.0
    """Each worker writes a heartbeat to the `workers` table this often, and refreshes the
    heartbeat of every segment it is running."""
    worker_dead_seconds: float = 20.0
    """A running segment whose heartbeat is older than this has lost its worker: the reaper
    hands it on at once the first time, with RETRY_BACKOFF_SECONDS doubling after that."""
    reaper_interval_seconds: float = 10.0
    """How often each worker runs the reaper (no separate process)."""
    segment_stale_seconds: float = 900.0
    """Work whose message may have been lost without any worker dying (pending segments,
    unplanned or unassembled jobs) untouched this long is enqueued again."""
    worker_shutdown_grace_seconds: float = 25.0
    """On SIGTERM a worker stops taking work and finishes what it holds; what is still
    running after this long is handed back to the queue at once (with the attempt it spent)
    and the worker exits. Keep it under the supervisor's limit: Kubernetes'
    terminationGracePeriodSeconds (30 s by default), compose's stop_grace_period."""
    worker_max_tasks: int = 0
    """A worker that has run this many tasks stops as on SIGTERM and execs a fresh copy of
    itself (same pid). A GPU worker keeps its engine through it: the new image adopts the
    engine's child process, warm. `kill -HUP` recycles at once. 0: never."""
    worker_max_rss_mb: float = 2048.0
    """The same past this resident size (MiB) of the worker's own process; a GPU worker's
    engine child is not counted (its memory is vLLM's own, kept through the recycle). 0:
    never. A Piper worker idles near 460 MiB and peaked at 1,212 MiB speaking Debian's
    GPL-3 text (163 segments, with SRT and VTT) through `narrator serve` on 2 cores
    (`python -m bench.book_memory`)."""
    ready_file: str = ""
    """A file the worker creates once its engine is warm and it consumes, and removes as it
    stops: a readiness probe tests for it (the Helm chart sets `/tmp/narrator-ready`)."""
    metrics_port: int = 0
    """A worker also serves Prometheus metrics on this port (for workers on other hosts);
    0: only through the API's /metrics."""


class GpuSettings(BaseSettings):
    """GPU engine (ENGINE=vllm-omni): Qwen3-TTS through vLLM-Omni."""

    model_config = CONFIG

    vllm_deploy_config: str = ""
    """vLLM-Omni deploy YAML (`default`: vLLM-Omni's own); empty:
    workers/engines/deploy/qwen3_tts_narrator.yaml, which adds priority scheduling, 80
    sequences per stage (64 batch + 16 realtime), CUDA graphs for 10 batch sizes and its own
    talker to Code2Wav hand-off (workers/engines/qwen3_handoff.py). A config of your own
    keeps working without the hand-off, at the stock speed."""
    vllm_max_in_flight: int = 64
    """Batch segments a GPU worker keeps on the engine at once: bounds GPU memory (sync
    requests come on top; the deploy config's max_num_seqs must cover both)."""
    vllm_realtime_sequences: int = 16
    """Sequences the deploy config keeps above VLLM_MAX_IN_FLIGHT for sync speech; the
    warm-up runs that many streamed requests beside its batch, so every batch size up to
    max_num_seqs has run before the first request. Change it with the deploy config."""
    vllm_warmup_batch: int = 0
    """Whole requests in the warm-up batch before a GPU worker takes work; 0:
    VLLM_MAX_IN_FLIGHT."""
    vllm_warmup_tokens: int = 100
    """Frames per warm-up request: 100 (8 s) runs every Code2Wav window shape, with its
    72-frame left context, at least once."""
    vllm_priority: bool = True
    """Sync requests get vLLM priority 0, batch segments 10."""
    vllm_stage_init_timeout: int = 900
    """Seconds allowed for the engine's stages to start."""
    vllm_engine_process: bool = True
    """Run the engine in a child process of the worker, away from its GIL (false: in the
    worker process)."""
    vllm_standby: bool = True
    """Keep a standby engine process beside each running engine process: it has imported
    vLLM-Omni (and started its stages' forkserver) and waits, so that when an engine's process
    dies its restart skips that import (20-25 s on an H100 or H200). Each holds about 2.6 GB
    of host memory and nothing on the GPU (workers/engines/engine_process.py)."""
    vllm_forkserver: bool = True
    """Start the engine's stage processes from a forkserver that imports vLLM-Omni once,
    beside the engine's own import, instead of spawning each to import it again
    (workers/engines/forkserver.py). false: vLLM-Omni's spawned stages, for a later
    vLLM-Omni that initialises CUDA on import."""
    vllm_mps: bool = True
    """Run the engines' stage processes (batch engine and realtime partition) under one CUDA
    MPS daemon for the worker's GPUs, so their kernels share the GPU at once rather than in
    turns, the batch engine's at below-normal priority (workers/engines/mps.py). Where the
    host runs MPS already (CUDA_MPS_PIPE_DIRECTORY set) the engines join it; without
    `nvidia-cuda-mps-control`, or where its daemon does not start, they run without
    (docs/design/realtime-partition.md)."""
    vllm_realtime_engine: bool = True
    """The realtime partition (workers/runtime/partition.py): a second, small engine of the
    same checkpoint on the same GPU that serves only sync and streamed speech, so their
    engine steps never carry batch segments; until it is warm, or if it fails, they use the
    batch engine. Needs VLLM_ENGINE_PROCESS; 17 GiB more GPU memory."""
    vllm_realtime_deploy_config: str = ""
    """The partition's deploy config; empty: workers/engines/deploy/qwen3_tts_realtime.yaml
    (16 sequences, 0.1 + 0.15 of the GPU's memory)."""
    cache_dir: str = ""
    """One folder for vLLM, Triton and Inductor compile caches (mount it as a volume: a
    start with warm caches skips compiling)."""


class WorkerSettings(CoreSettings, SynthesisSettings, AssemblySettings, AlignmentSettings,
                     LifecycleSettings, GpuSettings, EngineTuning):
    """Everything a Celery worker reads."""

    model_config = CONFIG

    @property
    def realtime_lane_threads(self) -> int:
        """Return the realtime lane's thread count."""
        if self.realtime_threads:
            return self.realtime_threads
        return 1 if self.engine in CPU_ENGINES else self.vllm_realtime_sequences

    def pool_threads(self, gpu: bool) -> int:
        """A worker's pool threads (WORKER_THREADS, or its default).

        On the GPU a thread per engine slot: a thread beyond the slots reserves a segment
        that waits for one, which another worker could be running. With 1.5 threads a slot,
        two workers split a 256-segment job 134 / 122 on two H100s, and the one job ran
        1.52x one worker's rate; over the engine double, 1.37x, and 1.79x with a thread a
        slot, for 1-2.5 % of one worker's rate. On Piper (and with no engine) a thread per
        core: each segment runs on one core (workers/engines/piper.py).
        """
        return self.worker_threads or (self.vllm_max_in_flight if gpu else cores())

    @property
    def sync_piece_limit(self) -> int:
        """Return how many pieces a sync request is spoken in at most."""
        return self.sync_pieces or (1 if self.engine in CPU_ENGINES else 4)


def cores() -> int:
    """Return the cores this process may run on (its affinity, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@lru_cache
def get_settings() -> WorkerSettings:
    """Return the process-wide worker settings."""
    return WorkerSettings()
