"""Qwen3-TTS through vLLM-Omni: one AsyncOmni per GPU, shared by every request.

The engine is created lazily, on first use, inside its own event-loop thread, in the child
process a worker owns (engine_process.py; VLLM_ENGINE_PROCESS=false: in the worker itself).
Task and realtime-lane threads submit requests to that loop and wait, so all concurrent
segments and sync requests share one continuously batched GPU. Importing this module needs
neither torch nor vLLM; starting the engine does.
"""

import asyncio
import concurrent.futures
import copy
import itertools
import json
import os
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from core.catalog import ModelInfo, Qwen3Config
from workers.engines import Audio, SpeechRequest, drain, forkserver, mps, slots_for, trace
from workers.engines.qwen3_handoff import WHOLE
from workers.engines.qwen3_stage1 import REALTIME_TAG
from workers.engines.qwen3_tts import (
    AudioCollector,
    OutputKind,
    Reference,
    additional_information,
)
from workers.tuning import tuning

log = structlog.get_logger()
REALTIME_PRIORITY, BATCH_PRIORITY = 0, 10  # vLLM serves lower values first
DEPLOY_DIR = Path(__file__).parent / "deploy"
STAGE1_SCHEDULER = "workers.engines.qwen3_stage1.RealtimeFirstScheduler"
TALKER_SCHEDULER = "workers.engines.qwen3_stage1.TalkerScheduler"
OmniFactory = Callable[[], Any]
PromptLength = Callable[[dict[str, list[Any]]], int]
References = Callable[[str], Reference | None]


def cache_environment(cache_dir: str) -> None:
    """Point vLLM, Triton and Inductor compile caches at one persistent folder."""
    if not cache_dir:
        return
    for name, sub in (("VLLM_CACHE_ROOT", "vllm"), ("TRITON_CACHE_DIR", "triton"),
                      ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ.setdefault(name, str(Path(cache_dir) / sub))


class VllmOmniEngine:
    """The Narrator engine protocol over one AsyncOmni."""

    def __init__(self, info: ModelInfo, config: Qwen3Config, *, max_in_flight: int = 64,
                 omni_factory: OmniFactory | None = None,
                 prompt_length: PromptLength | None = None,
                 references: References | None = None, priority: bool = True,
                 deploy_config: str = "", stage_init_timeout: int = 900,
                 use_mps: bool = False, mps_background: bool = False,
                 use_forkserver: bool = False) -> None:
        self.info = info
        self._use_mps = use_mps
        self._mps_background = mps_background
        self._use_forkserver = use_forkserver
        self._mps: Path | None = None  # the MPS daemon's folder while the engine runs
        self.config = config
        self.priority = priority
        self._factory = omni_factory or self._default_factory(deploy_config, stage_init_timeout)
        self._imports = omni_factory is None  # the start imports vLLM-Omni (prepare does)
        self._prompt_length = prompt_length
        self._references = references or (lambda _voice: None)
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._omni: Any = None
        self._thread: threading.Thread | None = None
        self._defaults: list[Any] = []
        self._lengths: concurrent.futures.Future[PromptLength] | None = None
        self._ids = itertools.count()

    @property
    def sample_rate(self) -> int:
        """Return the checkpoint's sample rate (24 kHz)."""
        return self.config.sample_rate

    def _default_factory(self, deploy_config: str, timeout: int) -> OmniFactory:
        def create() -> Any:
            # Started first: it imports vLLM-Omni for the stages while this process does.
            stages = forkserver.start() if self._use_forkserver else None
            from vllm_omni import AsyncOmni

            if self._prompt_length is None:  # its tokenizer loads while the stages start
                pool = concurrent.futures.ThreadPoolExecutor(1, "engine-tokenizer")
                self._lengths = pool.submit(_prompt_length_for, self.config)
                pool.shutdown(wait=False)
            if stages is not None:
                forkserver.install(stages)
            if self._use_mps:  # before the stage processes start: they inherit its pipe
                self._mps = mps.start(background=self._mps_background)
            kwargs: dict[str, Any] = {"stage_init_timeout": timeout}
            if deploy_config:  # Narrator's: Code2Wav serves realtime audio first
                kwargs["deploy_config"] = deploy_config
                kwargs["stage_overrides"] = json.dumps(stage_overrides())
            try:
                return AsyncOmni(model=str(self.config.path), **kwargs)
            except BaseException:
                mps.stop(self._mps)
                self._mps = None
                raise

        return create

    def prepare(self) -> None:
        """Do the start's imports now, long before the start (a standby engine process,
        engine_child.py): vLLM-Omni's, and its stages' forkserver's beside it."""
        if not self._imports:
            return
        if self._use_forkserver:
            forkserver.start()  # the start's own call then finds it running
        from vllm_omni import AsyncOmni  # noqa: F401

    def start(self) -> None:
        """Start the event-loop thread and the engine, once; later calls return at once."""
        with self._lock:
            if self._omni is not None:
                return
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name="vllm-omni-loop",
                                            daemon=True)
            self._thread.start()

            async def create() -> Any:
                return self._factory()

            omni = asyncio.run_coroutine_threadsafe(create(), loop).result()
            log.info("engine.stages_started", engine="vllm-omni", model=self.info.id)
            self._defaults = list(omni.default_sampling_params_list)
            if self._prompt_length is None:
                lengths, self._lengths = self._lengths, None
                self._prompt_length = lengths.result() if lengths is not None \
                    else _prompt_length_for(self.config)
            self._loop, self._omni = loop, omni
            log.info("engine.started", engine="vllm-omni", model=self.info.id)

    def close(self) -> None:
        """Shut the engine's stage processes down and stop its loop (worker shutdown)."""
        with self._lock:
            omni, loop, self._omni, self._loop = self._omni, self._loop, None, None
        if omni is None or loop is None:
            return

        async def shutdown() -> None:
            omni.shutdown()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=120)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        loop.close()
        mps.stop(self._mps)
        self._mps = None
        log.info("engine.stopped", engine="vllm-omni", model=self.info.id)

    def _params(self, request: SpeechRequest, kind: OutputKind) -> list[Any]:
        params = [copy.deepcopy(p) for p in self._defaults]
        talker = params[0]
        if request.max_new_tokens:
            talker.max_tokens = request.max_new_tokens
        if request.seed is not None:
            talker.seed = request.seed
            talker.extra_args = dict(talker.extra_args or {}) | {"tts_local_seed": request.seed}
        output_kind = _vllm_output_kind(kind)
        for p in params:
            if hasattr(p, "output_kind"):
                p.output_kind = output_kind
        return params

    def _prompt(self, request: SpeechRequest, reference: Reference | None,
                kind: OutputKind) -> dict[str, Any]:
        info: dict[str, list[Any]] = additional_information(self.config, request, reference)
        if kind is OutputKind.FINAL_ONLY:  # nobody streams it: decoded once (qwen3_handoff)
            info[WHOLE] = [1]
        assert self._prompt_length is not None
        return {"prompt_token_ids": [1] * self._prompt_length(info),
                "additional_information": info}

    async def _run(self, request: SpeechRequest, reference: Reference | None, kind: OutputKind,
                   on_chunk: Callable[[Audio], None] | None) -> Audio:
        # Every piece of per-request state lives here, keyed by this unique request id.
        priority = REALTIME_PRIORITY if request.realtime or not self.priority else BATCH_PRIORITY
        request_id = f"{request.request_id or 'req'}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        if priority == REALTIME_PRIORITY:  # Code2Wav's scheduler reads the tag (qwen3_stage1)
            request_id = f"{REALTIME_TAG}-{request_id}"
        collector = AudioCollector(kind)
        traced = trace.enabled() and priority == REALTIME_PRIORITY
        if traced:
            trace.event("submit", rid=request_id)
        async for output in self._omni.generate(
            self._prompt(request, reference, kind), request_id=request_id,
            sampling_params_list=self._params(request, kind), priority=priority,
        ):
            new = collector.add(output)
            if traced and len(new):
                trace.event("first_audio", rid=request_id)
                traced = False
            if on_chunk is not None and len(new):
                on_chunk(new)
        return collector.audio()

    def submit(self, request: SpeechRequest, kind: OutputKind,
               on_chunk: Callable[[Audio], None] | None = None, *,
               reference: Reference | None = None) -> concurrent.futures.Future[Audio]:
        """Put one request on the engine's loop; the future resolves with its audio."""
        self.start()
        assert self._loop is not None
        slots = slots_for(request, self._slots)
        slots.acquire()
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._run(request, reference, kind, on_chunk), self._loop)
        except BaseException:
            slots.release()
            raise
        future.add_done_callback(lambda _: slots.release())
        return future

    def _reference(self, request: SpeechRequest) -> Reference | None:
        # Reference clips come from storage: load them here, never on the engine's loop.
        return self._references(request.voice) if self.config.task_type == "Base" else None

    def synthesize(self, requests: list[SpeechRequest]) -> list[Audio]:
        """Speak every request; all of them run on the GPU at once."""
        futures = [self.submit(r, OutputKind.FINAL_ONLY, reference=self._reference(r))
                   for r in requests]
        return [f.result() for f in futures]

    def stream(self, request: SpeechRequest) -> Iterator[Audio]:
        """Yield audio chunks as the engine makes them."""
        chunks: queue.SimpleQueue[Audio] = queue.SimpleQueue()
        return drain(self.submit(request, OutputKind.DELTA, chunks.put,
                                 reference=self._reference(request)), chunks)


def stage_overrides() -> dict[str, dict[str, str]]:
    """Return the schedulers Narrator's deploy config runs: Code2Wav's always, and the
    talker's own when the engine is traced (NARRATOR_ENGINE_TRACE) or holds batch admissions
    (NARRATOR_TALKER_ADMIT_LEAST above 1); otherwise the talker runs vLLM-Omni's."""
    overrides = {"1": {"scheduler_cls": STAGE1_SCHEDULER}}
    if trace.enabled() or tuning().talker_admit_least > 1:
        overrides["0"] = {"scheduler_cls": TALKER_SCHEDULER}
    return overrides


def _vllm_output_kind(kind: OutputKind) -> Any:
    try:
        from vllm.sampling_params import RequestOutputKind
    except ImportError:  # no vLLM here: a test double reads our enum
        return kind
    return RequestOutputKind(kind.value)


def _prompt_length_for(config: Qwen3Config) -> PromptLength:
    """Return the talker's placeholder prompt length, as vLLM-Omni's server computes it."""
    from transformers import AutoTokenizer
    from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import (
        Qwen3TTSPromptEmbedsBuilder,
    )

    tokenizer = AutoTokenizer.from_pretrained(str(config.path), padding_side="left")

    def length(info: dict[str, list[Any]]) -> int:
        return int(Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information(
            additional_information=info, task_type=info["task_type"][0],
            tokenize_prompt=lambda text: tokenizer(text, padding=False)["input_ids"],
            codec_language_id=config.talker.get("codec_language_id"),
            spk_is_dialect=config.talker.get("spk_is_dialect")))

    return length
