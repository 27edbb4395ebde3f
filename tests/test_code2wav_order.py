"""Code2Wav's step plan (workers/engines/qwen3_stage1.py): realtime audio first, short steps.

The scheduler subclass itself runs only in vLLM-Omni's stage process on a GPU (the
gpu-marked test); its ordering is plain Python and is tested here with request stand-ins
that carry what vLLM's requests carry: ids, codec tokens and tokens already decoded.
"""

from collections import deque
from dataclasses import dataclass, field

from workers.engines.qwen3_stage1 import BATCH_TOKENS, REALTIME_TAG, plan_step, realtime

SEGMENT = 250 * 16  # a 250-frame whole answer: 16 codec tokens per frame
BUDGET = 65536      # Code2Wav's max_num_batched_tokens in Narrator's deploy config


@dataclass(eq=False)
class Req:
    request_id: str
    tokens: int = 0
    num_computed_tokens: int = 0
    prompt_token_ids: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_token_ids = [0] * self.tokens


def batch(n: int, tokens: int = SEGMENT) -> list[Req]:
    return [Req(f"segment-{i}-ab12", tokens) for i in range(n)]


def test_a_stream_admitted_after_a_burst_of_whole_segments_goes_first() -> None:
    burst = batch(50)
    stream = Req(f"{REALTIME_TAG}-say-7-cd34", 16)  # its first chunk: one frame
    waiting = deque([*burst, stream])
    keep, held = plan_step(waiting, [], BUDGET)
    assert keep == [stream]  # its step decodes nothing else: its output comes back at once
    assert held == burst     # they wait, in their order
    keep, held = plan_step(deque(burst), [], BUDGET)  # the step after: batch again
    assert keep == burst[:2]  # two segments of 250 frames fill BATCH_TOKENS
    assert held == burst[2:]
    assert sum(r.tokens for r in keep) <= BATCH_TOKENS


def test_running_requests_are_ordered_realtime_first_and_count_against_the_step() -> None:
    windows = batch(3, 2000)
    streams = [Req(f"{REALTIME_TAG}-s{i}", 1552) for i in range(2)]
    running = [windows[0], streams[0], windows[1], streams[1], windows[2]]
    keep, held = plan_step(deque(batch(4)), running, BUDGET)
    assert running == [streams[0], streams[1], *windows]  # stable within each class
    assert keep == []
    assert len(held) == 4


def test_a_step_never_splits_a_segment_and_always_makes_progress() -> None:
    big = batch(2, 40000)
    keep, held = plan_step(deque(big), [], BUDGET)
    assert keep == [big[0]]
    assert held == [big[1]]
    huge = batch(1, 70000)  # larger than a step: alone, it goes (vLLM-Omni splits it)
    assert plan_step(deque(huge), [], BUDGET) == (huge, [])
    streams = [Req(f"{REALTIME_TAG}-{i}", 30000) for i in range(2)]
    keep, held = plan_step(deque([*big, *streams]), [], BUDGET)
    assert keep == streams
    assert held == big


def test_requests_without_ready_tokens_keep_their_place_and_are_never_held() -> None:
    idle = batch(5, 0)  # whole answers still being spoken: nothing for Code2Wav yet
    ready = batch(3)
    waiting = deque([idle[0], ready[0], idle[1], ready[1], *idle[2:], ready[2]])
    keep, held = plan_step(waiting, [], BUDGET)
    assert held == [ready[2]]  # two segments fill BATCH_TOKENS
    assert [r for r in keep if r.tokens == 0] == idle


def test_only_tagged_ids_are_realtime() -> None:
    assert realtime(Req(f"{REALTIME_TAG}-say-1-ab"))
    assert not realtime(Req("segment-1-ab"))

    class Renamed(Req):
        external_req_id = f"{REALTIME_TAG}-say-2"

    assert realtime(Renamed("0f3a-internal"))

