"""Talker (stage 0) scheduler used only when the engine is traced: it records when a realtime
request is admitted (bench.engine_trace's `admit` column) and changes nothing else.

Tried and removed (session 8): running a step of realtime requests only, the batch sitting
it out, while a realtime request awaited its first frame. Under 64 segments its first frame
takes about 147 ms from submit (27 ms alone), about four talker steps of 31 ms. vLLM-Omni
0.26's AR model runner cannot take it: a request that sat a step out came back expecting
`all_token_ids` that vLLM's scheduler sends only for resumed requests, and the talker's
stage process died with a KeyError in `_update_states` (bench/results/
gpu_product_h100_1.7b_s8_boost_crash.log). Shortening the talker's steps for a realtime
request needs support inside vLLM-Omni, or preemption, which loses the batch's KV cache.
"""

from typing import Any

from workers.engines import trace
from workers.engines.qwen3_stage1 import realtime


def _build() -> type:
    from vllm_omni.core.sched.omni_ar_scheduler import OmniARAsyncScheduler

    class TracedTalkerScheduler(OmniARAsyncScheduler):  # type: ignore[misc]
        """vLLM-Omni's async AR scheduler, tracing realtime admissions."""

        def schedule(self, throttle_prefills: bool = False) -> Any:
            output = super().schedule(throttle_prefills)
            admitted = [r.req_id for r in output.scheduled_new_reqs if realtime(r)]
            if admitted:
                trace.event("talker_step", admitted=admitted,
                            requests=len(output.num_scheduled_tokens))
            return output

    return TracedTalkerScheduler


_built: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """Build `TracedTalkerScheduler` on first use (vLLM imports it by its dotted name)."""
    if name != "TracedTalkerScheduler":
        raise AttributeError(name)
    if name not in _built:
        _built[name] = _build()
    return _built[name]
