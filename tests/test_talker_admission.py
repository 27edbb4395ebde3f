"""The talker's batch admissions (workers/engines/qwen3_stage1.py `hold_admission`).

The scheduler subclass runs only in vLLM-Omni's stage process on a GPU; the decision is
plain Python, tested here with stand-ins carrying what vLLM's requests carry: an id and an
arrival time.
"""

from dataclasses import dataclass

from workers.engines.qwen3_stage1 import ADMIT_LEAST, REALTIME_TAG, hold_admission

NOW = 1000.0


@dataclass
class Req:
    request_id: str
    arrival_time: float


def segments(n: int, age: float = 0.05) -> list[Req]:
    return [Req(f"job-seg-{i}-ab12", NOW - age) for i in range(n)]


def test_off_by_default_nothing_is_held() -> None:
    assert ADMIT_LEAST == 1  # NARRATOR_TALKER_ADMIT_LEAST unset
    assert not hold_admission(segments(3), running=60, now=NOW)


def test_a_few_new_segments_wait_for_more_while_the_talker_is_busy() -> None:
    assert hold_admission(segments(3), running=60, now=NOW, least=16, wait_s=0.5)
    assert not hold_admission(segments(16), running=48, now=NOW, least=16, wait_s=0.5)


def test_the_oldest_waits_no_longer_than_the_bound() -> None:
    waited = [*segments(2), Req("job-seg-9-ab12", NOW - 0.51)]
    assert not hold_admission(waited, running=60, now=NOW, least=16, wait_s=0.5)


def test_an_idle_talker_and_a_realtime_request_are_never_kept_waiting() -> None:
    assert not hold_admission(segments(1), running=0, now=NOW, least=16, wait_s=0.5)
    stream = Req(f"{REALTIME_TAG}-say-3-0-cd34", NOW)
    assert not hold_admission([*segments(2), stream], running=60, now=NOW, least=16,
                              wait_s=0.5)
    assert not hold_admission([], running=60, now=NOW, least=16, wait_s=0.5)
