"""PocketSphinx forced alignment of real Piper speech (workers/aligners)."""

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sqlalchemy import Engine, text

from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from workers.aligners import Word, words_of
from workers.aligners.sphinx import SphinxAligner, _fill
from workers.engines import SpeechRequest

TEXTS = ["The ferry left the harbour at a quarter past seven.",
         "Nobody on the deck seemed to mind the delay at all.",
         "A child counted the gulls that followed the wake.",
         "The lighthouse keeper still walks to the point every evening."]


@pytest.fixture(scope="module")
def spoken() -> tuple[list[np.ndarray], int]:
    from workers.engine import get_engine

    engine = get_engine()
    voice = engine.info.voices[0].id
    return engine.synthesize([SpeechRequest(text=t, voice=voice) for t in TEXTS]), \
        engine.sample_rate


def test_words_are_the_spoken_texts_in_order_monotonic_and_inside_the_audio(
        spoken: tuple[list[np.ndarray], int]) -> None:
    clips, rate = spoken
    words = SphinxAligner().align(clips[0], rate, TEXTS[0])
    assert words is not None
    assert [w.word for w in words] == words_of(TEXTS[0])
    assert all(w.start < w.end for w in words)
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    assert words[0].start >= 0
    assert words[-1].end <= len(clips[0])
    assert not any(w.estimated for w in words)


def test_two_sentences_joined_are_split_where_the_first_clip_ends(
        spoken: tuple[list[np.ndarray], int]) -> None:
    clips, rate = spoken
    audio = np.concatenate(clips[:2])
    words = SphinxAligner().align(audio, rate, f"{TEXTS[0]} {TEXTS[1]}")
    assert words is not None
    first = len(words_of(TEXTS[0]))
    boundary = len(clips[0])
    assert words[first - 1].end <= boundary + rate // 10  # within 100 ms of the true join
    assert words[first].start >= boundary - rate // 10


def test_threads_aligning_at_once_get_what_one_thread_gets(
        spoken: tuple[list[np.ndarray], int]) -> None:
    """A PocketSphinx decoder holds one utterance: each thread must use its own."""
    clips, rate = spoken
    aligner = SphinxAligner()
    alone = [aligner.align(c, rate, t) for c, t in zip(clips, TEXTS, strict=True)]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            together = list(pool.map(lambda n: aligner.align(clips[n % 4], rate, TEXTS[n % 4]),
                                     range(16)))
            assert together == [alone[n % 4] for n in range(16)]


def test_threads_hearing_at_once_get_what_one_thread_gets(
        spoken: tuple[list[np.ndarray], int]) -> None:
    """The recogniser's language model is the text's: texts heard at once from threads
    each come back as heard alone (one utterance and one model at a time), all of it."""
    clips, rate = spoken
    aligner = SphinxAligner()
    alone = [aligner.transcribe(c, rate, t) for c, t in zip(clips, TEXTS, strict=True)]
    assert alone == [words_of(t) for t in TEXTS]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda n: aligner.transcribe(clips[n % 4], rate,
                                                              TEXTS[n % 4]), range(16)))
    assert together == [alone[n % 4] for n in range(16)]


def test_a_word_outside_the_dictionary_is_placed_between_its_neighbours(
        spoken: tuple[list[np.ndarray], int]) -> None:
    clips, rate = spoken
    text = TEXTS[0].replace("harbour", "zzqxharbour")  # no such word: not aligned
    words = SphinxAligner().align(clips[0], rate, text)
    assert words is not None
    odd = next(w for w in words if w.word == "zzqxharbour")
    assert odd.estimated
    at = words.index(odd)
    assert words[at - 1].end <= odd.start < odd.end <= words[at + 1].start


def test_nothing_to_align_gives_none() -> None:
    aligner = SphinxAligner()
    assert aligner.align(np.zeros(0, dtype=np.float32), 22050, "words") is None
    assert aligner.align(np.zeros(22050, dtype=np.float32), 22050, "...") is None


def test_unplaced_runs_share_their_gap_by_letters() -> None:
    placed = [Word("a", 0, 10), None, None, Word("d", 100, 110)]
    filled = _fill(["a", "bb", "cccc", "d"], placed, 200, rate=100)  # 60 ms: room enough
    assert [(w.word, w.start, w.end, w.estimated) for w in filled] == [
        ("a", 0, 10, False), ("bb", 10, 40, True), ("cccc", 40, 100, True),
        ("d", 100, 110, False)]


def test_an_unplaced_word_with_no_gap_shares_its_neighbours_spans() -> None:
    placed = [Word("a", 0, 10), None, Word("cc", 10, 40)]
    filled = _fill(["a", "bbb", "cc"], placed, 100, rate=1000)  # no room at all
    assert [(w.word, w.start, w.end, w.estimated) for w in filled] == [
        ("a", 0, 7, True), ("bbb", 7, 27, True), ("cc", 27, 40, True)]


def test_an_answer_does_not_depend_on_what_was_aligned_before(
        spoken: tuple[list[np.ndarray], int]) -> None:
    """PocketSphinx's front end keeps state between utterances; the aligner resets it."""
    clips, rate = spoken
    aligner = SphinxAligner()
    first = [aligner.align(c, rate, t) for c, t in zip(clips, TEXTS, strict=True)]
    for before in range(4):
        for k in range(4):
            aligner.align(clips[before], rate, TEXTS[before])
            assert aligner.align(clips[k], rate, TEXTS[k]) == first[k]


def test_a_pool_of_processes_aligns_from_threads_at_once_as_one_aligner_does(
        spoken: tuple[list[np.ndarray], int]) -> None:
    from workers.aligners.pool import PooledAligner

    clips, rate = spoken
    one = [SphinxAligner().align(clip, rate, text) for clip, text in zip(clips, TEXTS,
                                                                           strict=True)]
    pool = PooledAligner(2)
    try:
        with ThreadPoolExecutor(8) as threads:
            found = list(threads.map(lambda n: pool.align(clips[n % 4], rate, TEXTS[n % 4]),
                                     range(16)))
        assert found == [one[n % 4] for n in range(16)]
        # A closed pool starts its processes again on the next request.
        pool.close()
        assert pool.align(clips[0], rate, TEXTS[0]) == one[0]
    finally:
        pool.close()


def test_segments_whose_words_are_not_kept_yet_are_aligned_by_the_assembly(
        pipeline_env: None, db: Engine) -> None:
    """The align tasks may still be running (or never ran) when the last segment's assembly
    starts: the assembly aligns what is missing, so no segment keeps the estimate for that."""
    import json
    import uuid

    from core.catalog import catalog
    from storage import store_for
    from tests.support import insert_job
    from workers import pipeline
    from workers.engines.piper import PiperEngine
    from workers.settings import get_settings

    book = ["The boats came in at dawn. Gulls followed them home.\n\n"
            "The market opened at noon, and the square filled slowly."]
    job_id = uuid.UUID(str(insert_job(db, book, "wav", {"subtitles": ["vtt", "words"]})))
    _, ids = pipeline.plan(job_id)
    assert len(ids) == 2
    engine = PiperEngine(catalog(get_settings())[0])
    for segment_id in ids:  # no align task runs for them
        done = pipeline.synthesize(segment_id, engine=engine)
        assert done is not None
        assert done.checked
    assert pipeline.assemble(job_id).outcome == "completed"
    with db.connect() as connection:
        result = connection.execute(text("SELECT result FROM jobs WHERE id = :id"),
                                    {"id": job_id}).scalar_one()
    store = store_for()
    manifest = json.loads(store.get(result["manifest_key"]))
    assert manifest["timing"] == {"aligned": 2, "estimated": 0}
    track = json.loads(store.get(result["subtitles"]["words"]))
    assert [w["word"] for w in track["words"]][:3] == ["the", "boats", "came"]


VERIFY_BOOK = [
    "The ferry left the harbour at dawn. The gulls followed it out. Nobody said a word.",
    "By noon the fog had lifted. The captain counted the crates. There were fourteen.",
    "Her brother had warned her about the crossing. It was never the wind. It was the tide.",
    "In the afternoon the island came into view. It had a white church. The bells rang.",
    "The keeper walked down to the pier. He carried a lamp. The boat came in slowly.",
    "They unloaded the crates by lantern light. The children watched. Then they slept.",
]


def test_verify_flags_a_segment_that_dropped_sentences_or_speaks_another_text(
        pipeline_env: None, db: Engine) -> None:
    """verify "flag": every segment is heard back; a part whose last two sentences are
    silent, and one holding another segment's speech, are flagged against the job's median;
    the clean ones are not."""
    import json
    import uuid

    import soundfile as sf

    from core.catalog import catalog
    from core.keys import part_key
    from storage import store_for
    from tests.support import insert_job
    from workers import assembly, pipeline
    from workers.engines.piper import PiperEngine
    from workers.settings import get_settings

    job_id = uuid.UUID(str(insert_job(db, ["\n\n".join(VERIFY_BOOK)], "wav",
                                      {"subtitles": [], "verify": "flag"})))
    _, ids = pipeline.plan(job_id)
    assert len(ids) == len(VERIFY_BOOK)
    engine = PiperEngine(catalog(get_settings())[0])
    for segment_id in ids:
        done = pipeline.synthesize(segment_id, engine=engine)
        assert done is not None
        assert done.checked
    store = store_for()

    def part(n: int) -> np.ndarray:
        with store.open(part_key(job_id, n)) as f:
            audio, _ = sf.read(f, dtype="float32")
        return np.asarray(audio)

    dropped = part(1)
    dropped[len(dropped) // 3:] = 0.0  # its last two sentences are not spoken
    store.put(part_key(job_id, 1), assembly.part_bytes(dropped, engine.sample_rate))
    other, own = part(0), len(part(3))  # segment 0's speech, at segment 3's length
    swapped = np.zeros(own, dtype=np.float32)
    swapped[:min(own, len(other))] = other[:own]
    store.put(part_key(job_id, 3), assembly.part_bytes(swapped, engine.sample_rate))

    assert pipeline.assemble(job_id).outcome == "completed"
    with db.connect() as connection:
        result = connection.execute(text("SELECT result FROM jobs WHERE id = :id"),
                                    {"id": job_id}).scalar_one()
    verification = result["verification"]
    assert verification["flagged"] == [1, 3], verification
    assert verification["unchecked"] == []
    assert {w["index"] for w in verification["worst"][:2]} == {1, 3}
    manifest = json.loads(store.get(result["manifest_key"]))
    assert manifest["verification"] == verification
    segments = manifest["segments"]
    assert all(0.0 <= s["wer"] <= 1.5 for s in segments)
    assert [s.get("misheard", False) for s in segments] == [
        False, True, False, True, False, False]
    clean = [s["wer"] for s in segments if not s.get("misheard")]
    assert max(clean) <= verification["threshold"]


def test_the_verification_summary_compares_each_segment_with_the_jobs_median() -> None:
    from workers.alignment import verification, word_error_rate

    assert word_error_rate(["a", "b", "c", "d"], ["a", "x", "c"]) == 0.5
    assert word_error_rate(["a"], []) == 1.0
    assert word_error_rate([], []) == 0.0
    summary = verification({0: 0.1, 1: 0.2, 2: 0.15, 3: 0.9, 4: None}, 0.3)
    assert summary["median_wer"] == 0.175
    assert summary["threshold"] == 0.475
    assert summary["flagged"] == [3]
    assert summary["worst"][0] == {"index": 3, "wer": 0.9}
    assert summary["unchecked"] == [4]
