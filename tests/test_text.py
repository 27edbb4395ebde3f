"""Text cleaning, sentence splitting and packing."""

import pytest

from core.text import Gaps, clean, pack, plan_pieces, sentences, speakable


def test_clean_drops_control_characters_and_keeps_newlines() -> None:
    assert clean("a\x00b\x07c\r\nd\u200be") == "abc\nde"


def test_speakable_needs_a_letter_or_digit() -> None:
    assert not speakable("\x01\x02 ... !!")
    assert speakable("ok")


def test_sentences_respect_abbreviations() -> None:
    got = sentences("Dr. Smith arrived at 5 p.m. on Monday. He left early.")
    assert got == ["Dr. Smith arrived at 5 p.m. on Monday.", "He left early."]


def test_pack_never_splits_inside_a_sentence_under_the_limit() -> None:
    items = ["A" * 150 + ".", "B" * 150 + ".", "C" * 150 + "."]
    pieces = list(pack(items, 400))
    assert pieces == [items[0] + " " + items[1], items[2]]


def test_pack_splits_a_sentence_over_the_limit_at_words() -> None:
    long = " ".join(["word"] * 200)
    pieces = list(pack([long], 100))
    assert all(len(p) <= 100 for p in pieces)
    assert " ".join(pieces) == long


def test_plan_gives_chapter_and_paragraph_gaps() -> None:
    gaps = Gaps(segment=0.1, paragraph=0.5, chapter=2.0)
    pieces = list(plan_pieces(["One. Two.\n\nThree.", "Four."], 400, gaps))
    assert [(p.chapter, p.text, p.pause_after) for p in pieces] == [
        (0, "One. Two.", 0.5), (0, "Three.", 2.0), (1, "Four.", 2.0)]


def test_inline_pause_marks_set_the_silence_after_a_piece() -> None:
    gaps = Gaps(segment=0.1, paragraph=0.5, chapter=2.0)
    text = "One. [pause:1.5s] Two. [PAUSE: 2 s]\n\nThree.[pause:99s]"
    pieces = [(p.text, p.pause_after) for p in plan_pieces([text, "Four."], 400, gaps)]
    assert pieces == [("One.", 1.5), ("Two.", 2.0), ("Three.", 30.0), ("Four.", 2.0)]


def test_strip_pauses_removes_the_marks() -> None:
    from core.text import strip_pauses

    assert "pause" not in strip_pauses("Wait [pause:2s] here.")


@pytest.mark.parametrize(("written", "said"), [
    ("Dr. Smith paid $12.50 on March 5, 2024 at 3:30 pm.",
     "Doctor Smith paid twelve dollars and fifty cents on March fifth, twenty twenty-four at "
     "three thirty p m."),
    ("In 1984, 45% of the 1,234 voters came 2nd \u2014 or so.",
     "In nineteen eighty-four, forty-five percent of the one thousand two hundred and "
     "thirty-four voters came second, or so."),
    ("See No. 7, e.g. the 1990s, on 2024-03-05.",
     "See number seven, for example the nineteen nineties, on March fifth, twenty twenty-four."),
    ("It costs \u20ac3 million; he left on 5th of June 1999 at 10:00.",
     "It costs three million euros; he left on the fifth of June, nineteen ninety-nine at "
     "ten o'clock."),
    ("Pi is 3.14 and 1990\u20131995 \u201cmatters\u201d\u2026",
     "Pi is three point one four and nineteen ninety to nineteen ninety-five \"matters\"..."),
    ("Call 555-1234 about version 2.0.1.",
     "Call five five five, one two three four about version two point zero point one."),
    ("Main St. is near St. Paul.", "Main St. is near Saint Paul."),
])
def test_spoken_form_of_english(written: str, said: str) -> None:
    from core.normalize import spoken

    assert spoken(written, "en") == said


def test_spoken_form_uses_the_language_for_numbers() -> None:
    from core.normalize import spoken

    assert spoken("Er hat 21 \u00c4pfel.", "de") == "Er hat einundzwanzig \u00c4pfel."
    assert spoken("J'ai 3 chats.", "fr") == "J'ai trois chats."
    # num2words has no Chinese: the digits stay for the model to read
    assert spoken("\u6211\u6709 3 \u4e2a", "zh") == "\u6211\u6709 3 \u4e2a"
