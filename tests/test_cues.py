"""Subtitle cues from aligned words (workers.book.timeline.sentence_cues), with the estimate as the
fallback, and the manifest's record of which each segment got."""

import uuid
from itertools import pairwise
from pathlib import Path

import pytest

from core.normalize import spoken
from core.text import sentences
from models import Job, Segment
from workers.aligners import Word, words_of
from workers.book.timeline import Timeline, manifest, sentence_cues, word_track

RATE = 1000  # one sample a millisecond: spans read as ms
TEXT = "It was 3:45 p.m. on the pier. Dr. Marsh waved."


def _segments(*texts: str, samples: int = 5000) -> list[Segment]:
    return [Segment(id=uuid.uuid4(), index=n, chapter=0, text=t, samples=samples,
                    pause_after=0.5, attempts=1) for n, t in enumerate(texts)]


def _words(text: str, start: int = 100, step: int = 300) -> list[Word]:
    """Fake aligned words for a text's spoken form: `step` ms apart, 200 ms long."""
    return [Word(w, start + k * step, start + k * step + 200)
            for k, w in enumerate(words_of(spoken(text, "en")))]


def test_cues_run_from_their_first_words_start_to_their_last_words_end() -> None:
    segments = _segments(TEXT, TEXT)
    timeline = Timeline(segments, RATE)
    words = _words(TEXT)
    cues, timing = sentence_cues(segments, timeline, "en", lambda s: words)
    assert timing == ["aligned", "aligned"]
    # Written form in the cues, although the aligner heard "three forty five p m", "doctor".
    sentences = ["It was 3:45 p.m. on the pier.", "Dr. Marsh waved."]
    assert [text for _, _, text in cues] == sentences * 2
    first = len(words_of(spoken("It was 3:45 p.m. on the pier.", "en")))
    assert cues[0][:2] == (words[0].start / RATE, words[first - 1].end / RATE)
    assert cues[1][:2] == (words[first].start / RATE, words[-1].end / RATE)
    # The second segment's cues sit in the book's time: after the first segment and its pause.
    offset = timeline.starts[1] / RATE
    assert cues[2][:2] == (offset + words[0].start / RATE, offset + words[first - 1].end / RATE)
    assert all(start < end for start, end, _ in cues)


@pytest.mark.parametrize("words", [None, "", "short"])
def test_a_segment_without_matching_words_keeps_the_estimate(words: str | None) -> None:
    segments = _segments(TEXT, "The lamp was cold. She lit it anyway.")
    timeline = Timeline(segments, RATE)
    second: list[Word] | None = _words("The lamp was cold.") if words == "short" \
        else None if words is None else []
    lookup = {0: _words(TEXT), 1: second}
    cues, timing = sentence_cues(segments, timeline, "en", lambda s: lookup[s.index])
    assert timing == ["aligned", "estimated"]
    # Estimated: the segment's span shared by letters, the last cue ending with its audio.
    assert cues[-1][1] == (timeline.starts[1] + 5000) / RATE
    assert cues[2][0] == timeline.starts[1] / RATE
    # Without any words at all, every segment is estimated, as before alignment existed.
    assert sentence_cues(segments, timeline, "en")[1] == ["estimated", "estimated"]


def test_the_manifest_says_which_segments_were_aligned() -> None:
    segments = _segments(TEXT, TEXT)
    timeline = Timeline(segments, RATE)
    job = Job(id=uuid.uuid4(), model="piper", voice="joe", response_format="wav", speed=1.0,
              options={"subtitles": ["srt"]}, input_characters=len(TEXT) * 2)
    record = manifest(job, segments, timeline, [], None, ["aligned", "estimated"])
    assert record["timing"] == {"aligned": 1, "estimated": 1}
    assert [s["timing"] for s in record["segments"]] == ["aligned", "estimated"]
    assert "timing" not in manifest(job, segments, timeline, [], None)  # no subtitles asked


def test_the_word_track_is_in_the_books_time_and_lists_estimated_segments() -> None:
    segments = _segments(TEXT, TEXT, TEXT)
    timeline = Timeline(segments, RATE)
    words = _words(TEXT)
    lookup = {0: words, 1: None, 2: words}
    _, timing = sentence_cues(segments, timeline, "en", lambda s: lookup[s.index])
    track = word_track(segments, timeline, lambda s: lookup[s.index], timing)
    assert track["estimated_segments"] == [1]
    assert [w["segment"] for w in track["words"]] == [0] * len(words) + [2] * len(words)
    third = track["words"][len(words)]
    assert third["word"] == "it"
    assert third["start"] == (timeline.starts[2] + words[0].start) / RATE
    assert third["end"] == (timeline.starts[2] + words[0].end) / RATE


LONG = ("When the ferry finally reached the island, long after the sun had gone down, the "
        "keeper was waiting on the pier with a lamp; nobody had told him about the delay.")


def test_a_long_sentence_is_cut_at_its_clauses_from_their_own_words() -> None:
    from workers.book.cues import CUE_MAX_CHARS
    from workers.book.cues import pieces as cut

    pieces = cut(LONG)
    assert " ".join(pieces) == LONG
    assert len(pieces) > 1
    assert all(len(p) <= CUE_MAX_CHARS for p in pieces)
    assert cut("It cost 1,000 dollars.", limit=18) == ["It cost 1,000", "dollars."]
    assert cut("Short, and sweet.") == ["Short, and sweet."]
    segments = _segments(LONG, samples=20000)
    timeline = Timeline(segments, RATE)
    words = _words(LONG, step=200)
    cues, timing = sentence_cues(segments, timeline, "en", lambda s: words)
    assert timing == ["aligned"]
    assert [text for _, _, text in cues] == pieces
    assert cues[0][0] == words[0].start / RATE
    assert cues[-1][1] == words[-1].end / RATE
    counts = [len(words_of(spoken(p, "en"))) for p in pieces]
    assert cues[1][0] == words[counts[0]].start / RATE  # the second clause's first word
    assert all(a < b <= c for (a, b, _), (c, _, _) in pairwise(cues))
    # Estimated, the clauses share the segment's span by their letters.
    cues, timing = sentence_cues(segments, timeline, "en")
    assert timing == ["estimated"]
    assert [text for _, _, text in cues] == pieces
    assert cues[-1][1] == 20000 / RATE


LICENCES = Path("/usr/share/common-licenses")


@pytest.mark.parametrize("name", ["GPL-3", "Apache-2.0"])
def test_every_cue_of_a_licence_fits_two_lines_and_keeps_names_and_numbers_whole(
        name: str) -> None:
    """Debian's licence texts: long sentences, names ("Free Software Foundation, Inc."),
    dates and section numbers, in every shape a book has them."""
    from workers.book.cues import CLOSING, CUE_MAX_CHARS, LINE_MAX_CHARS, lines
    from workers.book.cues import pieces as cut

    text = (LICENCES / name).read_text()
    found = [s for paragraph in text.split("\n\n")
             for s in sentences(" ".join(paragraph.split()), "en")]
    assert len(found) > 50
    for sentence in found:
        pieces = cut(sentence)
        assert " ".join(pieces) == sentence
        for before, after in pairwise(pieces):
            assert not CLOSING.match(after.split(" ")[0]), (before, after)
        for piece in pieces:
            if " " in piece:  # a single word longer than a cue (a URL) stays whole
                assert len(piece) <= CUE_MAX_CHARS, piece
            shown = lines(piece)
            assert " ".join(shown) == piece
            assert len(shown) <= 2
            assert all(len(line) <= LINE_MAX_CHARS for line in shown if " " in line), shown
    sentence = ("Copyright (C) 2007 Free Software Foundation, Inc. and everyone else who has "
                "contributed to the text of this License, Version 3, 29 June 2007, may copy it.")
    pieces = cut(sentence)
    assert all(len(p) <= CUE_MAX_CHARS for p in pieces)
    joints = [(a.split(" ")[-1], b.split(" ")[0]) for a, b in pairwise(pieces)]
    for inside in [("Free", "Software"), ("Software", "Foundation"), ("Foundation,", "Inc."),
                   ("29", "June"), ("June", "2007,"), ("(C)", "2007")]:
        assert inside not in joints, pieces
