"""Shared state under threads: workers run a threads pool and the API runs work in threads.

Every check runs the same work sequentially first, then from many threads at once released
by a barrier, and requires the same results (Piper's audio: the same length, within its
noise).
"""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from core.normalize import spoken
from core.text import Gaps, plan_pieces, sentences

THREADS = 8
ROUNDS = 5


def _at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads that all start together; return their results in order."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def _text(n: int, sentences_per_paragraph: int = 16) -> str:
    """A distinct multi-paragraph text: every sentence names its text and its place."""
    paragraphs = []
    for p in range(3):
        paragraphs.append(" ".join(
            f"Text {n} paragraph {p} sentence {s} is about item {n * 100 + s}, Dr. Lee said."
            for s in range(sentences_per_paragraph)))
    return "\n\n".join(paragraphs)


def test_threads_planning_distinct_texts_at_once_get_their_sequential_plans() -> None:
    texts = [_text(n) for n in range(THREADS)]
    expected = [list(plan_pieces([t], 120, Gaps())) for t in texts]
    assert all(len(pieces) > 10 for pieces in expected)
    for _ in range(ROUNDS):
        got = _at_once([lambda t=t: list(plan_pieces([t], 120, Gaps()))  # type: ignore[misc]
                        for t in texts])
        assert got == expected


def test_threads_splitting_shared_sentences_at_once_keep_every_sentence() -> None:
    # Texts that share most sentences: a swapped text would be hard to tell from its own.
    common = " ".join(f"Shared sentence {s} of the book." for s in range(60))
    texts = [f"Opening of copy {n}. {common} Closing of copy {n}." for n in range(THREADS)]
    expected = [sentences(t) for t in texts]
    assert all(len(s) == 62 for s in expected)
    for _ in range(ROUNDS):
        assert _at_once([lambda t=t: sentences(t) for t in texts]) == expected  # type: ignore[misc]


@pytest.mark.parametrize("language", ["en", "tr", "ar", "da"])
def test_spoken_form_under_threads_matches_the_sequential_one(language: str) -> None:
    # num2words keeps one converter per language and some write to it while converting.
    texts = [f"{n * 7919 + 13} and {n}.{n + 5} and {1000 + n * 37}" for n in range(THREADS * 4)]
    expected = [spoken(t, language) for t in texts]
    for _ in range(ROUNDS):
        assert _at_once([lambda t=t: spoken(t, language)  # type: ignore[misc]
                         for t in texts]) == expected


def test_the_engine_is_built_once_when_threads_ask_for_it_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.runtime.engine
    import workers.settings

    monkeypatch.setenv("NARRATOR_ENGINE", "piper")
    workers.settings.get_settings.cache_clear()
    workers.runtime.engine.reset_engine()
    try:
        engines = _at_once([workers.runtime.engine.get_engine] * THREADS)
        assert len({id(engine) for engine in engines}) == 1
    finally:
        workers.runtime.engine.reset_engine()
        workers.settings.get_settings.cache_clear()


def test_piper_segments_spoken_from_threads_at_once_keep_their_own_lengths() -> None:
    """A Piper worker runs a segment per core on one shared single-threaded session; sync
    speech keeps its own session on every core."""
    from core.catalog import catalog
    from workers.aligners import words_of
    from workers.engines import SpeechRequest
    from workers.engines.piper import PiperEngine
    from workers.settings import get_settings

    engine = PiperEngine(catalog(get_settings())[0])
    assert engine.batch_voice.session.get_session_options().intra_op_num_threads == 1
    assert engine.voice.session.get_session_options().intra_op_num_threads == 0  # default
    # Text n has n + 1 sentences, so a swapped or cut answer shows in its length (Piper's
    # noise moves a length by a few percent, never by a sentence).
    texts = [" ".join(f"Segment {n} says sentence {s} aloud." for s in range(n + 1))
             for n in range(4)]
    requests = [SpeechRequest(text=t, voice="joe") for t in texts]
    expected = [len(engine.synthesize([r])[0]) for r in requests]
    assert all(b > a * 1.3 for a, b in pairwise(expected))
    for _ in range(2):
        got = _at_once([lambda r=r: len(engine.synthesize([r])[0])  # type: ignore[misc]
                        for r in requests + [replace(r, realtime=True) for r in requests]])
        for n, samples in enumerate(got):
            assert abs(samples - expected[n % 4]) < 0.1 * expected[n % 4], (n, samples)
    # Words placed as it speaks: each thread gets its own text's words, inside its own audio.
    timed = _at_once([lambda r=r: engine.synthesize_words([r])[0]  # type: ignore[misc]
                      for r in requests * 2])
    for n, (audio, words) in enumerate(timed):
        assert words is not None
        assert [w.word for w in words] == words_of(texts[n % 4])
        assert words[-1].end <= len(audio)


def test_keepalive_frames_and_data_frames_of_one_request_never_collide(tmp_path: Any) -> None:
    """The file channel numbers frames by count: the keepalive thread and the thread that
    publishes audio must take turns, or a frame overwrites another and the request hangs."""
    import asyncio

    from core.channel import FileChannel, Message
    from workers.speech import Pulse

    channel = FileChannel(tmp_path)
    pulse = Pulse(channel, "req", every=0.0005)
    pulse.start(Message("meta", {"sample_rate": 1}))
    for n in range(300):
        pulse.publish(Message("data", data=n.to_bytes(2, "big")))
    pulse.finish(Message("end", {"duration": 0.0}))

    async def read() -> list[Message]:
        return [m async for m in channel.listen("req", 1.0, 1.0)]

    frames = asyncio.run(read())
    data = [int.from_bytes(m.data, "big") for m in frames if m.kind == "data"]
    assert data == list(range(300))
    assert frames[0].kind == "meta"
    assert frames[-1].kind == "end"
    assert {m.kind for m in frames} <= {"meta", "data", "alive", "end"}
