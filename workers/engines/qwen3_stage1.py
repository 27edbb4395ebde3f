"""Code2Wav (stage 1) scheduling for Narrator's deploy config: realtime audio first.

vLLM-Omni 0.26 schedules Code2Wav's requests first come, first served, and carries no
priority into stage 1. When a wave of job segments ends together, their whole answers
(workers/engines/qwen3_handoff.py) reach Code2Wav in one burst: each step then admits as
many as its token budget holds (65,536 tokens: about 16 segments of 250 frames, decoded one
after another at about 34 ms each on an H100), and a streamed request's first chunk, queued
behind them, waited 1-2.8 s (the slowest first audio of 12 probes spread over a wave's
phases: bench/results/gpu_engine_h100_1.7b_2026-11-24_results.log).

`RealtimeFirstScheduler` is vLLM-Omni's own generation scheduler with three changes, made to
its queues right after it has taken in the chunks that arrived (and so before it admits any
request for the step):
- realtime requests (sync speech and streams; the adapter tags their ids with
  `REALTIME_TAG`) go before batch requests, in the running list and in the waiting queue;
- a step that has realtime audio to decode decodes nothing else: a step's output comes back
  only when all of it is done, and a realtime chunk decoded beside two whole segments came
  back 210-270 ms later instead of about 12 ms (bench.engine_trace);
- the batch requests' ready tokens admitted in one step are capped at `BATCH_TOKENS` (two
  segments of 250 frames), so a realtime chunk that arrives during a step waits for less;
  the first batch request of a step always goes, and one that would not fit the step's
  whole budget waits for the next step instead of being split across steps. A cap of one
  segment (4096) halved the first job's rate (84.6 audio-s/s, GPU 40 % busy):
  each Code2Wav step has a fixed cost (about 95 ms per step of one segment beside a full
  talker), so fewer segments per step starve the talker of free slots.
Held requests go back to the front of the waiting queue, in order, when the step is built.

The adapter names this class as stage 1's `scheduler_cls` (vLLM-Omni's `stage_overrides`)
when it runs Narrator's deploy config. It is imported in Code2Wav's stage process, which has
vLLM-Omni; the ordering itself (`plan_step`) is plain Python, tested on the CPU. The module
also holds the talker's scheduler (stage 0, `TalkerScheduler`): batch admissions held
together (`hold_admission`) and its steps traced (workers/engines/trace.py).
"""

import time
from collections.abc import Callable, Iterable, MutableSequence, Sized
from typing import Any

from workers.engines import trace
from workers.tuning import tuning

REALTIME_TAG = "narrator-rt"
# Code2Wav's batch cap and the talker's batch admissions (hold_admission), read in the stage
# processes, which inherit the worker's environment (workers/tuning.py).
BATCH_TOKENS = tuning().c2w_batch_tokens
ADMIT_LEAST = tuning().talker_admit_least
ADMIT_WAIT_S = tuning().talker_admit_wait_ms / 1000


def realtime(request: Any) -> bool:
    """Say whether a stage-1 request belongs to a realtime (sync or streamed) answer."""
    ids = (getattr(request, name, None) for name in ("external_req_id", "request_id", "req_id"))
    return any(isinstance(value, str) and REALTIME_TAG in value for value in ids)


def pending(request: Any) -> int:
    """Return the tokens a request has ready for Code2Wav and not yet decoded."""
    return max(0, len(request.prompt_token_ids or ()) - int(request.num_computed_tokens))


def plan_step(waiting: Iterable[Any], running: MutableSequence[Any], budget: int,
              batch_tokens: int = BATCH_TOKENS) -> tuple[list[Any], list[Any]]:
    """Order one step's requests: return (waiting to keep, in order; waiting to hold).

    `running` is sorted in place, realtime first (stable). When a realtime request has
    tokens ready, every waiting batch request with tokens ready is held. Otherwise batch
    requests with ready tokens beyond `batch_tokens` for the step, or beyond what is left of
    `budget`, are held; the first batch request of a step always goes unless it would not
    fit the budget and something else is scheduled (then it waits a step rather than being
    split).
    """
    running_list = list(running)
    running_list.sort(key=lambda r: not realtime(r))
    running[:] = running_list
    used = sum(pending(r) for r in running_list)
    batch_used = sum(pending(r) for r in running_list if not realtime(r))
    queue = sorted(waiting, key=lambda r: not realtime(r))
    realtime_ready = any(realtime(r) and pending(r) for r in (*running_list, *queue))
    keep: list[Any] = []
    held: list[Any] = []
    for request in queue:
        tokens = pending(request)
        if realtime(request) or tokens == 0:
            used += tokens
            keep.append(request)
            continue
        if realtime_ready:
            held.append(request)
            continue
        fits = used + tokens <= budget or used == 0
        if fits and (batch_used == 0 or batch_used + tokens <= batch_tokens):
            used += tokens
            batch_used += tokens
            keep.append(request)
        else:
            held.append(request)
    return keep, held


def _build() -> type:
    """Code2Wav's (stage 1) scheduler class, made in the stage process.

    Its body is one class over 60 lines long: it subclasses vLLM-Omni's generation scheduler,
    which can only be imported where vLLM-Omni is installed (the stage process, and the
    tests' engine double), so the class is defined inside this function; the ordering
    itself is plan_step, above, tested on the CPU.
    """
    from vllm.logger import init_logger
    from vllm_omni.core.sched.omni_generation_scheduler import OmniGenerationScheduler

    log = init_logger("narrator.code2wav")

    class RealtimeFirstScheduler(OmniGenerationScheduler):  # type: ignore[misc]
        """vLLM-Omni's generation scheduler, realtime first (see the module's docstring)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._narrator_held: list[Any] = []
            self._narrator_failed = False
            self._narrator_seen: set[str] = set()  # realtime requests traced as ready
            adapter = self.chunk_transfer_adapter
            if adapter is not None:
                adapter.process_pending_chunks = self._after_chunks(
                    adapter.process_pending_chunks)
            log.info("narrator code2wav scheduler: realtime first %s, batch tokens %d",
                     adapter is not None, BATCH_TOKENS)

        def _after_chunks(self, original: Callable[..., None]) -> Callable[..., None]:
            def wrapped(waiting: Any, running: Any, **kwargs: Any) -> None:
                original(waiting, running, **kwargs)
                if self._narrator_failed:
                    return
                try:
                    if trace.enabled():
                        self._trace_ready(waiting, running)
                    keep, held = plan_step(waiting, running, self.max_num_scheduled_tokens)
                    if held or [id(r) for r in keep] != [id(r) for r in waiting]:
                        waiting.clear()  # FCFS: a deque of requests
                        waiting.extend(keep)
                    self._narrator_held = held
                except Exception:  # never stop Code2Wav: fall back to vLLM-Omni's order
                    self._narrator_failed = True
                    log.exception("narrator code2wav scheduler failed: vLLM-Omni's order")
            return wrapped

        def schedule(self, throttle_prefills: bool = False) -> Any:
            try:
                output = super().schedule(throttle_prefills)
            finally:
                held, self._narrator_held = self._narrator_held, []
                for request in reversed(held):
                    if request.request_id in self.requests:
                        self.waiting.prepend_request(request)
            if trace.enabled() and output.total_num_scheduled_tokens:
                trace.event("c2w_step", tokens=output.total_num_scheduled_tokens,
                            requests=len(output.num_scheduled_tokens), held=len(held),
                            rt=[r for r in output.num_scheduled_tokens if REALTIME_TAG in r])
            return output

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            if trace.enabled():
                rt = [r for r in scheduler_output.num_scheduled_tokens if REALTIME_TAG in r]
                if rt:
                    trace.event("c2w_out", rt=rt)
            return outputs

        def _trace_ready(self, waiting: Any, running: Any) -> None:
            for request in (*waiting, *running):
                rid = str(request.request_id)
                if REALTIME_TAG in rid and rid not in self._narrator_seen and pending(request):
                    self._narrator_seen.add(rid)
                    trace.event("c2w_ready", rid=rid, tokens=pending(request))

    return RealtimeFirstScheduler


def hold_admission(waiting: Sized, running: int, now: float, least: int = ADMIT_LEAST,
                   wait_s: float = ADMIT_WAIT_S) -> bool:
    """Say whether the talker should admit none of its waiting requests this step.

    A step that admits a request runs its prefill beside everyone's decode, outside the
    decode-only CUDA graph. A worker's segments end at different steps (their texts differ,
    some end early), and each end brings a new segment at once, so nearly every step can be
    such a step. Holding batch requests until `least` of them wait, or the oldest has waited
    `wait_s`, admits them together. Never held: an idle talker's, or any realtime request
    (which takes the batch ones in with it). `least` 1 (the default) holds nothing.
    """
    if least <= 1 or not waiting or running == 0 or len(waiting) >= least:
        return False
    if any(realtime(r) for r in waiting):  # type: ignore[attr-defined]
        return False
    oldest = min(float(r.arrival_time) for r in waiting)  # type: ignore[attr-defined]
    return now - oldest < wait_s


def _build_talker() -> type:
    """The talker's (stage 0) scheduler under Narrator's deploy config: vLLM-Omni's async AR
    scheduler, with batch admissions held together (`hold_admission`, off by default) and,
    when the engine is traced, one `talker_step` event per step (bench.engine_trace).

    Running realtime requests alone for a step while the batch sat it out (to get their first
    frame sooner) crashed vLLM-Omni 0.26's AR runner with a KeyError for `all_token_ids`
    (bench/results/gpu_product_h100_1.7b_2026-11-24_boost_crash.log), so it is not done:
    holding waiting requests uses vLLM-Omni's own hook for it.
    """
    from vllm.logger import init_logger
    from vllm_omni.core.sched.omni_ar_scheduler import OmniARAsyncScheduler

    log = init_logger("narrator.talker")

    class TalkerScheduler(OmniARAsyncScheduler):  # type: ignore[misc]
        """vLLM-Omni's async AR scheduler, batch admissions held together."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._narrator_failed = False
            log.info("narrator talker scheduler: admit batch requests %d at a time or after "
                     "%.0f ms", ADMIT_LEAST, ADMIT_WAIT_S * 1000)

        def _should_defer_waiting_admission(self) -> bool:
            if self._narrator_failed:
                return False
            try:
                return hold_admission(self.waiting, len(self.running), time.time())
            except Exception:  # never stop the talker: admit as vLLM-Omni does
                self._narrator_failed = True
                log.exception("narrator talker scheduler failed: vLLM-Omni's admission")
                return False

        def schedule(self, throttle_prefills: bool = False) -> Any:
            output = super().schedule(throttle_prefills)
            if trace.enabled() and output.total_num_scheduled_tokens:
                new = output.scheduled_new_reqs
                trace.event("talker_step", admitted=[r.req_id for r in new if realtime(r)],
                            new=len(new), requests=len(output.num_scheduled_tokens),
                            tokens=output.total_num_scheduled_tokens, waiting=len(self.waiting))
            return output

    return TalkerScheduler


_BUILDERS: dict[str, Callable[[], type]] = {
    "RealtimeFirstScheduler": _build, "TalkerScheduler": _build_talker}
_built: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """Build a scheduler class on first use (vLLM imports it by its dotted name)."""
    if name not in _BUILDERS:
        raise AttributeError(name)
    if name not in _built:
        _built[name] = _BUILDERS[name]()
    return _built[name]
