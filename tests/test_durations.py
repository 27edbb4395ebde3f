"""Words placed on an engine's own phoneme durations (workers/aligners/durations.py)."""

from workers.aligners.durations import Spoken, from_durations


def _said(groups: list[str], step: int = 100, pause: int = 50) -> list[Spoken]:
    """The engine's phonemes: one sample run of `step` each, `pause` between groups."""
    out, at = [], 0
    for group in groups:
        for phoneme in group:
            out.append(Spoken(phoneme, at, at + step))
            at += step
        at += pause
    return out


def test_words_the_engine_ran_together_get_their_own_spans() -> None:
    # "on the" said as one group, as espeak-ng says it; each word alone: "ɔn", "ðə".
    said = _said(["ɔnðə", "ʃɪp"])
    words = from_durations(["on", "the", "ship"], [["ɔ", "n"], ["ð", "ə"], ["ʃ", "ɪ", "p"]],
                           said, 1000, 1000)
    assert words is not None
    assert [(w.word, w.start, w.end, w.estimated) for w in words] == [
        ("on", 0, 200, False), ("the", 200, 400, False), ("ship", 450, 750, False)]


def test_a_short_word_said_otherwise_in_a_sentence_takes_the_gap_its_neighbours_leave() -> None:
    # "a" alone is the letter's name ("ˈeɪ"); in the sentence it is "ɐ", matched to nothing.
    said = _said(["ðɛɹ", "wʌz", "ɐ", "bˈoʊt", "ɪnðə", "hˈɑːɹbɚ"])
    alone = [["ð", "ɛ", "ɹ"], ["w", "ʌ", "z"], ["ˈ", "e", "ɪ"], ["b", "ˈ", "o", "ʊ", "t"],
             ["ɪ", "n"], ["ð", "ə"], ["h", "ˈ", "ɑ", "ː", "ɹ", "b", "ɚ"]]
    words = from_durations(["there", "was", "a", "boat", "in", "the", "harbour"], alone, said,
                           5000, 1000)
    assert words is not None
    a = words[2]
    assert a.estimated
    assert words[1].end <= a.start
    assert a.end <= words[3].start
    assert not any(w.estimated for n, w in enumerate(words) if n != 2)


def test_a_text_the_engine_did_not_say_places_nothing() -> None:
    said = _said(["hˈɛloʊ", "wˈɜːld"])
    alone = [["k", "æ", "t"], ["d", "ɑ", "ɡ"], ["f", "ɪ", "ʃ"], ["b", "ɜː", "d"]]
    assert from_durations(["cat", "dog", "fish", "bird"], alone, said, 2000, 1000) is None
    assert from_durations([], [], said, 2000, 1000) is None
