"""The GPU aligner's own parts (workers/aligners/qwen3.py): decoding the model's markers into
spans, and batching the segments that arrive together. The model itself needs a GPU and
vLLM (timed by bench.gpu_aligner on the device); here a double stands in at that boundary."""

import itertools
import threading
import time
from typing import Any, ClassVar

import numpy as np
import pytest

from core.hearing import word_error_rate
from workers.aligners import Word, qwen3
from workers.aligners.qwen3 import Qwen3Aligner, spans

MARK = 99
RATE = 24_000


def _logits(bins: list[int], classes: int = 50) -> tuple[np.ndarray, list[int]]:
    """Prompt tokens with a marker per bin (between other tokens), and one-hot logits."""
    tokens, rows = [], []
    for b in bins:
        tokens += [5, MARK]
        rows += [np.zeros(classes), np.eye(classes)[b]]
    return np.array(rows), tokens


def test_markers_become_word_spans_in_samples() -> None:
    logits, tokens = _logits([0, 3, 4, 10])  # bins of 80 ms
    words = spans(logits, tokens, MARK, 80.0, ["hello", "there"], RATE * 2, RATE, list)
    assert words is not None
    assert [(w.word, w.start, w.end) for w in words] == [
        ("hello", 0, round(0.24 * RATE)), ("there", round(0.32 * RATE), round(0.8 * RATE))]


def test_spans_stay_in_order_and_inside_the_audio() -> None:
    logits, tokens = _logits([10, 4, 2, 40])  # an end before its start, a mark past the end
    words = spans(logits, tokens, MARK, 80.0, ["a", "b"], RATE, RATE, list)
    assert words is not None
    for before, after in itertools.pairwise(words):
        assert before.start <= before.end <= after.start <= after.end
    assert words[-1].end <= RATE


def test_markers_that_do_not_pair_with_the_words_give_none() -> None:
    logits, tokens = _logits([1, 2, 3])
    assert spans(logits, tokens, MARK, 80.0, ["a", "b"], RATE, RATE, list) is None



def test_the_prompt_is_the_official_aligners_with_no_chat_turn_before_the_audio() -> None:
    """The audio comes first, then each word and its two markers (Qwen's own processor);
    vLLM-Omni 0.26's user turn before the audio put every marker one or two bins late."""
    assert qwen3.prompt(["Hello", "there"]) == (
        "<|audio_start|><|audio_pad|><|audio_end|>"
        "Hello<timestamp><timestamp>there<timestamp><timestamp>")
    assert "<|im_start|>" not in qwen3.prompt(["a"])
    assert qwen3.prompt(["a", "b", "c"]).count("<timestamp>") == 6

class _Double:
    """The model at the GPU boundary: records each batch it is given."""

    batches: ClassVar[list[int]] = []

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        self.options = options

    def align(self, calls: list[Any]) -> list[Any]:
        time.sleep(0.05)  # a forward pass: calls that arrive meanwhile wait for the next
        _Double.batches.append(len(calls))
        return [[Word(w, 0, 1) for w in call.words] for call in calls]


def _from_threads(count: int, call: Any) -> list[Any]:
    """Run call(n) for n in range(count), each on its own thread, all released at once."""
    results: list[Any] = [None] * count
    gate = threading.Barrier(count)

    def one(n: int) -> None:
        gate.wait()
        results[n] = call(n)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_segments_that_arrive_together_are_aligned_in_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qwen3, "_Model", _Double)
    _Double.batches.clear()
    aligner = Qwen3Aligner("unused", batch=8)
    results = _from_threads(24, lambda n: aligner.align(np.zeros(RATE, np.float32), RATE,
                                                        f"word {n} here"))
    assert [[w.word for w in r] for r in results] == [["word", str(n), "here"]
                                                      for n in range(24)]
    assert sum(_Double.batches) == 24
    assert max(_Double.batches) <= 8
    assert len(_Double.batches) < 24  # some went together


def test_a_model_that_cannot_load_fails_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str, options: dict[str, Any]) -> None:
        raise OSError("no checkpoint at " + path)

    monkeypatch.setattr(qwen3, "_Model", broken)
    aligner = Qwen3Aligner("/nowhere")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no checkpoint"):
            aligner.align(np.zeros(RATE, np.float32), RATE, "some words")


def test_nothing_to_align_gives_none_without_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qwen3, "_Model", None)  # would fail if it were called
    aligner = Qwen3Aligner("unused")
    assert aligner.align(np.zeros(RATE, np.float32), RATE, "...") is None
    assert aligner.align(np.zeros(0, np.float32), RATE, "words") is None


def test_aligner_qwen3_aligns_on_the_gpu_and_hears_with_pocketsphinx(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ALIGNER=qwen3: the worker's checker (workers/book/alignment.py) places words with the GPU
    aligner; the recognition check keeps PocketSphinx's pool."""
    import workers.settings
    from workers.book import alignment

    monkeypatch.setenv("NARRATOR_ALIGNER", "qwen3")
    monkeypatch.setenv("NARRATOR_ALIGNER_MODEL", "/models/qwen3-forced-aligner")
    monkeypatch.setenv("NARRATOR_ALIGNER_BATCH", "4")
    workers.settings.get_settings.cache_clear()
    monkeypatch.setattr(qwen3, "_Model", _Double)
    monkeypatch.setattr(alignment, "_POOL", [])
    try:
        checker = alignment._pooled()
        words = checker.align(np.zeros(RATE, np.float32), RATE, "Two words.")
        assert [w.word for w in words] == ["two", "words"]
        assert checker.processes == 4
        assert checker.transcribe.__self__.__class__.__name__ == "PooledAligner"
    finally:
        workers.settings.get_settings.cache_clear()


def test_an_unknown_aligner_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import pydantic

    import workers.settings

    monkeypatch.setenv("NARRATOR_ALIGNER", "whisper")
    workers.settings.get_settings.cache_clear()
    try:
        with pytest.raises(pydantic.ValidationError):
            workers.settings.get_settings()
    finally:
        workers.settings.get_settings.cache_clear()


def test_words_are_letters_of_any_script_and_each_chinese_character() -> None:
    from workers.aligners import words_of

    assert words_of("Grüße aus Köln!") == ["grüße", "aus", "köln"]
    assert words_of("Don\u2019t stop, it's 3:45 p.m.") == ["don't", "stop", "it's", "3", "45",
                                                           "p", "m"]
    assert words_of("你好，世界。Hello你好") == ["你", "好", "世", "界", "hello", "你", "好"]
    assert words_of("كَتَبَ الولد") == ["كتب", "الولد"]  # vowel signs dropped, as Qwen's
    assert words_of("cafe\u0301") == ["café"]  # a decomposed accent joins its letter


@pytest.mark.parametrize(("aligner", "language", "accepted"), [
    ("pocketsphinx", "en", True), ("pocketsphinx", "de", False),
    ("qwen3", "de", True), ("qwen3", "zh", True), ("qwen3", "ja", False)])
def test_word_times_are_accepted_in_the_languages_the_aligner_covers(
        monkeypatch: pytest.MonkeyPatch, aligner: str, language: str, accepted: bool) -> None:
    """The API (ALIGNER, shared with the workers) and the worker's gate agree."""
    import pydantic

    import api.settings
    import workers.settings
    from api.schemas import JobBody
    from workers.book import alignment

    monkeypatch.setenv("NARRATOR_ALIGNER", aligner)
    api.settings.get_settings.cache_clear()
    workers.settings.get_settings.cache_clear()
    body = {"input": "Text.", "language": language, "subtitles": ["srt", "words"]}
    try:
        if accepted:
            JobBody.model_validate(body)
        else:
            with pytest.raises(pydantic.ValidationError, match="forced alignment"):
                JobBody.model_validate(body)
        assert alignment._wants({"subtitles": ["srt"], "language": language}) is accepted
        if language != "en":  # the recognition check follows RECOGNIZER, whatever aligns
            with pytest.raises(pydantic.ValidationError, match="covers en here"):
                JobBody.model_validate(body | {"subtitles": ["srt"], "verify": "flag"})
    finally:
        api.settings.get_settings.cache_clear()
        workers.settings.get_settings.cache_clear()


@pytest.mark.parametrize(("recognizer", "language", "accepted"), [
    ("pocketsphinx", "en", True), ("pocketsphinx", "de", False),
    ("qwen3", "de", True), ("qwen3", "ar", True), ("qwen3", "ja", False)])
def test_verify_is_accepted_in_the_languages_the_recognizer_hears(
        monkeypatch: pytest.MonkeyPatch, recognizer: str, language: str, accepted: bool) -> None:
    """RECOGNIZER (shared by the API and the workers): the API refuses `verify` outside its
    languages, and the worker's gate hears exactly the jobs the API let through."""
    import pydantic

    import api.settings
    import workers.settings
    from api.schemas import JobBody
    from models import Job
    from workers.book import alignment

    monkeypatch.setenv("NARRATOR_RECOGNIZER", recognizer)
    api.settings.get_settings.cache_clear()
    workers.settings.get_settings.cache_clear()
    body = {"input": "Text.", "language": language, "verify": "flag"}
    try:
        if accepted:
            JobBody.model_validate(body)
        else:
            with pytest.raises(pydantic.ValidationError, match="recogniser that covers"):
                JobBody.model_validate(body)
        job = Job(options={"language": language, "verify": "flag"})
        assert alignment.verifies(job) is accepted
    finally:
        api.settings.get_settings.cache_clear()
        workers.settings.get_settings.cache_clear()


class _Hearing:
    """Qwen3-ASR at the GPU boundary: answers as the model does, for each call's audio."""

    batches: ClassVar[list[int]] = []

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        self.options = options

    def transcribe(self, calls: list[Any]) -> list[str]:
        time.sleep(0.05)
        _Hearing.batches.append(len(calls))
        return [f"language English<asr_text>Heard {len(call.audio)} samples."
                for call in calls]


def test_the_gpu_recognizer_hears_batches_from_many_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.aligners import qwen3_asr
    from workers.aligners.qwen3_asr import Qwen3Recognizer

    monkeypatch.setattr(qwen3_asr, "_AsrModel", _Hearing)
    _Hearing.batches.clear()
    recognizer = Qwen3Recognizer("unused", batch=6)
    results = _from_threads(18, lambda n: recognizer.transcribe(
        np.zeros(100 + n, np.float32), RATE, "some words"))
    assert [[w.word for w in r] for r in results] == [["heard", str(100 + n), "samples"]
                                                      for n in range(18)]
    assert all(w.estimated for r in results for w in r)  # no times: never used to place
    assert max(_Hearing.batches) <= 6
    assert len(_Hearing.batches) < 18
    assert recognizer.transcribe(np.zeros(0, np.float32), RATE, "words") is None


def test_an_answer_becomes_words_and_a_segments_tokens_are_bounded() -> None:
    from workers.aligners.qwen3_asr import heard, tokens_for

    assert [w.word for w in heard("language German<asr_text>Grüße aus Köln.")] == [
        "grüße", "aus", "köln"]
    assert [w.word for w in heard("no tag at all")] == ["no", "tag", "at", "all"]
    assert tokens_for(["a"] * 50) == 16 + 150
    assert tokens_for([]) == 28


def test_recognizer_qwen3_hears_on_the_gpu_and_aligns_with_pocketsphinx(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """RECOGNIZER=qwen3 with the CPU aligner: the worker's checker hears with the GPU model
    and aligns with PocketSphinx's pool; what the GPU model heard (no times) is never used to
    place the words, and the segment's word error rate comes from it."""
    import workers.settings
    from workers.aligners import qwen3_asr
    from workers.book import alignment

    monkeypatch.setenv("NARRATOR_RECOGNIZER", "qwen3")
    monkeypatch.setenv("NARRATOR_RECOGNIZER_BATCH", "5")
    workers.settings.get_settings.cache_clear()
    monkeypatch.setattr(qwen3_asr, "_AsrModel", _Hearing)
    monkeypatch.setattr(alignment, "_POOL", [])
    try:
        checker = alignment._pooled()
        assert checker.processes == 5
        assert checker.heard_spans is False
        assert checker.align.__self__.__class__.__name__ == "PooledAligner"
        heard = checker.transcribe(np.zeros(7, np.float32), RATE, "Heard seven samples.")
        assert [w.word for w in heard] == ["heard", "7", "samples"]
        assert word_error_rate(["heard", "seven", "samples"],
                               [w.word for w in heard]) == pytest.approx(1 / 3)
    finally:
        workers.settings.get_settings.cache_clear()


def test_with_both_gpu_models_the_recognizer_loads_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """ALIGNER=qwen3 and RECOGNIZER=qwen3: Qwen3-ASR is loaded before the aligner, the
    order measured on the H100 (its vLLM engine core in a process of its own, the aligner's
    in this one), whichever call comes first."""
    import workers.settings
    from workers.aligners import qwen3_asr
    from workers.book import alignment

    order: list[str] = []

    class Aligning(_Double):
        def __init__(self, path: str, options: dict[str, Any]) -> None:
            order.append("aligner")
            super().__init__(path, options)

    class Hearing(_Hearing):
        def __init__(self, path: str, options: dict[str, Any]) -> None:
            order.append("recognizer")
            super().__init__(path, options)

    monkeypatch.setenv("NARRATOR_ALIGNER", "qwen3")
    monkeypatch.setenv("NARRATOR_RECOGNIZER", "qwen3")
    workers.settings.get_settings.cache_clear()
    monkeypatch.setattr(qwen3, "_Model", Aligning)
    monkeypatch.setattr(qwen3_asr, "_AsrModel", Hearing)
    monkeypatch.setattr(alignment, "_POOL", [])
    try:
        checker = alignment._pooled()
        assert [w.word for w in checker.align(np.zeros(RATE, np.float32), RATE, "A b.")] == [
            "a", "b"]
        assert order == ["recognizer", "aligner"]
        assert checker.heard_spans is False
    finally:
        workers.settings.get_settings.cache_clear()
