"""Text cleaning, sentence splitting and packing."""

from workers.text import Gaps, clean, pack, plan_pieces, sentences, speakable


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
    from workers.text import strip_pauses

    assert "pause" not in strip_pauses("Wait [pause:2s] here.")
