"""Hostile text on the text paths: every pass over user text is linear, silence is bounded,
and text with nothing to say becomes silence, never a segment.

The timing tests run each text function on 1, 10 and 100 KB of the input that was worst for
its patterns, and require the time to grow about linearly (100 KB within 30x of 10 KB, and
under a second). A cubic pattern took 1.0 s for 1.5 KB; a quadratic one grows 100x. The
property tests (hypothesis) feed arbitrary text through the same functions with a deadline.
"""

import time
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.normalize import spoken
from core.text import (
    Gaps,
    Piece,
    check_plan,
    clauses,
    clean,
    paragraphs,
    plan_pieces,
    speakable,
    speakers,
    strip_pauses,
    voiced_runs,
)
from workers.book.timeline import subtitles
from workers.speech import groups

GAPS = Gaps(0.25, 0.6, 1.5)


def plan(text: str) -> list[Piece]:
    return list(plan_pieces([text], 400, GAPS))


FUNCTIONS: dict[str, Callable[[str], object]] = {
    "clean": clean, "paragraphs": lambda t: list(paragraphs(t)), "plan": plan,
    "strip_pauses": strip_pauses, "speakers": speakers, "voiced_runs": voiced_runs,
    "clauses": lambda t: clauses(t, 84), "spoken": lambda t: spoken(t, "en"),
    "groups": lambda t: groups(t, "en", 4),
}
# Each is a unit repeated to the size asked, then "x": what made the old patterns backtrack.
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "voice mark left open": lambda n: "Hi [voice:" + " " * n + "x",
    "voice marks nested": lambda n: "[voice:" * (n // 7) + "x",
    "pause mark left open": lambda n: "Hi. [pause:" + " " * n + "1",
    "pause digits": lambda n: "[pause:" + "1" * n + " x",
    "combining marks": lambda n: "a" + "\u0301" * (n // 2) + "\u0316" * (n // 2),
    "spaces then no dash": lambda n: "a" + " " * n + "b",
    "digit groups": lambda n: "11-" * (n // 3) + "x",
    "blank lines": lambda n: "\n" + " " * n + "x",
    "clause breaks": lambda n: "a," * (n // 2) + "b",
}


def _seconds(function: Callable[[str], object], text: str) -> float:
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        function(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("shape", ADVERSARIAL)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_text_functions_take_linear_time_on_adversarial_input(name: str, shape: str) -> None:
    function, make = FUNCTIONS[name], ADVERSARIAL[shape]
    one, ten, hundred = (_seconds(function, make(kb * 1000)) for kb in (1, 10, 100))
    # Linear: ten times the text, about ten times the time (a quadratic pass takes 100 times).
    assert hundred < 30 * max(ten, 0.002), (one, ten, hundred)
    # And never long: 100 KB took 0.02-1.8 s on a busy 2-core machine; a quadratic pass of
    # 100 KB takes minutes. (The API reads long texts in a worker thread, off its loop.)
    assert hundred < 10.0, (one, ten, hundred)


@settings(deadline=2000, max_examples=60)
@given(st.text(alphabet=st.sampled_from(list("ab .,:;-—–\n[]\\:vocepaus01s\u0301\u0316"))
               | st.characters(), max_size=3000))
def test_any_text_plans_quickly_and_keeps_every_word(text: str) -> None:
    pieces = list(plan_pieces([text], 80, GAPS))
    check_plan([text], pieces)  # raises if a word is lost or reordered
    assert all(speakable(p.text) for p in pieces)
    assert all(0 <= p.pause_after <= 30.0 for p in pieces)


def test_a_gap_of_many_pause_marks_is_capped_at_thirty_seconds() -> None:
    pieces = plan("Hi." + "[pause:30s]" * 40 + " Bye.")
    assert [p.pause_after for p in pieces] == [30.0, 1.5]


def test_a_job_plans_at_most_an_hour_of_marked_silence() -> None:
    pieces = list(plan_pieces(["Hi. [pause:30s] " * 500], 400, GAPS))
    assert sum(p.pause_after for p in pieces) <= 3600 + 1.5


def test_combining_mark_runs_are_cut_to_thirty_before_normalising() -> None:
    text = clean("a" + "\u0301" * 30000 + "\u0316" * 30000 + " b")
    assert len(text) <= 32 + 2
    assert text.endswith(" b")


NOVEL_BREAKS = ["...", "\u2026", "\u2014", "\u2013", "* * *", "***", "\u00a7", "#", "~",
                "\u201c", "\u201d", "'", "\"", "\u2014\u2014\u2014", ". . .", "-", "(\u2026)"]


@pytest.mark.parametrize("mark", NOVEL_BREAKS)
def test_a_paragraph_with_nothing_to_say_is_silence_not_a_segment(mark: str) -> None:
    pieces = plan(f"It was late.\n\n{mark}\n\nMorning came.")
    assert [p.text for p in pieces] == ["It was late.", "Morning came."]
    assert pieces[0].pause_after == GAPS.chapter  # a scene break: the longest gap
    check_plan([f"It was late.\n\n{mark}\n\nMorning came."], pieces)


@settings(deadline=2000, max_examples=60)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=20), st.sampled_from(["srt", "vtt"]))
@example(["Then --> 00:00:01,000 --> 00:00:02,000 <b>bold</b> & done"], "vtt")
@example(["Then --> 00:00:01,000 --> 00:00:02,000"], "srt")
def test_any_cue_text_renders_one_block_per_cue_that_parsers_read_back(
        texts: list[str], kind: str) -> None:
    cues = [(n * 2.0, n * 2.0 + 1.5, part) for n, text in enumerate(texts)
            for part in clauses(text, 84)][:200]
    rendered = subtitles(cues, kind)
    timings = [line for line in rendered.splitlines() if "-->" in line]
    assert len(timings) == len(cues)
    assert all(line.count("-->") == 1 and line[:2].isdigit() for line in timings)
    if kind == "vtt":
        assert "<" not in rendered.replace("<v ", "")
