"""Talker (stage 0) scheduling for Narrator's deploy config: a realtime request's first frame
comes out of a short step.

Under a full batch a talker step takes about 34 ms on an H100 (64-80 sequences, each running
the code predictor over 15 residual codebooks), against about 8 ms alone, and a streamed
request's first audio waits for several of them: its admission, its prefill and, with async
scheduling, the step after (bench.engine_trace, session 8: 147 ms median from submit to the
first frame under 64 segments, 27 ms alone). `RealtimeTalkerScheduler` is vLLM-Omni's async
AR scheduler with one change (`NARRATOR_TALKER_BOOST=0` turns it off): while a realtime
request (its id carries REALTIME_TAG) has not yet produced its first frame, a step
runs the realtime requests only, and the batch requests sit that step out, keeping their KV
cache and per-request state (vLLM-Omni keeps a request's model state by request id, and vLLM
re-adds a request that sat a step out to its persistent batch). At most BOOST_SHARE of the
last BOOST_WINDOW steps run so, so that a flood of sync requests cannot stall the batch.

With NARRATOR_ENGINE_TRACE set it also traces each realtime request's admission.
The choice of steps (`boost_step`) is plain Python, tested on the CPU.
"""

import os
from collections import deque
from collections.abc import Iterable
from typing import Any

from workers.engines import trace
from workers.engines.qwen3_stage1 import realtime

BOOST = os.environ.get("NARRATOR_TALKER_BOOST", "1") != "0"
BOOST_WINDOW = 32  # steps
BOOST_SHARE = 0.25  # of BOOST_WINDOW at most


def awaiting_first_frame(request: Any) -> bool:
    """Say whether a talker request has not yet been scheduled past its prompt: its prefill
    step, and with async scheduling the step after, make its first frame."""
    return int(request.num_computed_tokens) <= int(request.num_prompt_tokens)


def boost_step(waiting: Iterable[Any], running: Iterable[Any], recent: deque[bool],
               max_running: int) -> bool:
    """Say whether this step runs the realtime requests only.

    Yes when a realtime request is awaiting its first frame, the batch has not sat out
    BOOST_SHARE of the recent steps already, and every running request has a place.
    """
    running = list(running)
    if len(running) >= max_running or sum(recent) >= BOOST_SHARE * (recent.maxlen or 1):
        return False
    return any(realtime(r) and awaiting_first_frame(r) for r in (*waiting, *running))


def _build() -> type:
    from vllm.v1.core.sched.request_queue import create_request_queue
    from vllm_omni.core.sched.omni_ar_scheduler import OmniARAsyncScheduler

    class RealtimeTalkerScheduler(OmniARAsyncScheduler):  # type: ignore[misc]
        """vLLM-Omni's async AR scheduler, realtime first frames (see the module)."""

        waiting: Any
        running: Any
        skipped_waiting: Any

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._narrator_recent: deque[bool] = deque(maxlen=BOOST_WINDOW)

        def schedule(self, throttle_prefills: bool = False) -> Any:
            boost = BOOST and boost_step(self.waiting, self.running, self._narrator_recent,
                                         self.max_num_running_reqs)
            self._narrator_recent.append(boost)
            if not boost:
                return self._traced(super().schedule(throttle_prefills), boost)
            batch_running = [r for r in self.running if not realtime(r)]
            free = self.max_num_running_reqs - len(self.running)
            rt_waiting = [r for r in self.waiting if realtime(r)][:free]
            all_waiting, skipped = self.waiting, self.skipped_waiting
            all_waiting.remove_requests(rt_waiting)
            self.waiting = create_request_queue(self.policy)
            self.skipped_waiting = create_request_queue(self.policy)
            for request in rt_waiting:
                self.waiting.add_request(request)
            self.running = [r for r in self.running if realtime(r)]
            try:
                output = super().schedule(throttle_prefills)
            finally:
                for request in (*self.waiting, *self.skipped_waiting):  # not admitted, or
                    all_waiting.add_request(request)  # put back by the step
                self.waiting, self.skipped_waiting = all_waiting, skipped
                self.running = self.running + batch_running
            return self._traced(output, boost)

        def _traced(self, output: Any, boost: bool) -> Any:
            if trace.enabled():
                admitted = [r.req_id for r in output.scheduled_new_reqs if realtime(r)]
                if admitted or boost:
                    trace.event("talker_step", admitted=admitted, boost=boost,
                                requests=len(output.num_scheduled_tokens))
            return output

    return RealtimeTalkerScheduler


_built: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """Build `RealtimeTalkerScheduler` on first use (vLLM imports it by its dotted name)."""
    if name != "RealtimeTalkerScheduler":
        raise AttributeError(name)
    if name not in _built:
        _built[name] = _build()
    return _built[name]
