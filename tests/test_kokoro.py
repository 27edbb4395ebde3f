"""Kokoro, the second CPU engine: its voices in English and Japanese, heard back by the
recogniser, several requests at once beside Piper, and through `narrator serve` with its
default settings (sync, streamed, and a job with a cast)."""

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from core.catalog import KOKORO_VOICES, kokoro_model
from tests.support import Process, audio_stats, embedded, wait_job
from tests.test_cast import SCENE
from workers.engines import SpeechRequest
from workers.engines.kokoro import MAX_TOKENS, SAMPLE_RATE, KokoroEngine, pieces

PARAGRAPH = ("The old lighthouse keeper climbed the stairs every evening at seven o'clock. "
             "He had done it for thirty years, and he knew each step by heart.")


@pytest.fixture(scope="module")
def kokoro() -> KokoroEngine:
    return KokoroEngine(kokoro_model("kokoro"))


def test_each_voice_speaks_english_that_the_recogniser_hears(kokoro: KokoroEngine) -> None:
    from core.hearing import word_error_rate
    from workers.aligners import words_of
    from workers.aligners.sphinx import SphinxAligner

    hearer, expected = SphinxAligner(), [w.lower() for w in words_of(PARAGRAPH)]
    for voice in KOKORO_VOICES:
        audio = kokoro.synthesize([SpeechRequest(text=PARAGRAPH, voice=voice)])[0]
        assert 6.0 < len(audio) / SAMPLE_RATE < 14.0, voice
        heard = hearer.transcribe(audio, SAMPLE_RATE, PARAGRAPH) or []
        assert word_error_rate(expected, [w.word.lower() for w in heard]) <= 0.2, voice


def test_japanese_text_is_read_with_its_own_g2p(kokoro: KokoroEngine) -> None:
    text = "今日はいい天気ですね。散歩に行きましょう。"
    chunks = list(kokoro.stream(SpeechRequest(text=text, voice="jf_alpha", realtime=True)))
    assert len(chunks) == 2  # a chunk per sentence
    assert all(len(c) / SAMPLE_RATE > 0.8 for c in chunks)
    # 今日 read as kyō and the topic particle は as wa (espeak-ng reads neither)
    assert kokoro._japanese.sentences(text)[0] == "kʲoː βa ii teŋkʲi desɨ ne."


def test_speed_and_sentences_shape_the_audio(kokoro: KokoroEngine) -> None:
    text = "One sentence here. And a second one there."
    chunks = list(kokoro.stream(SpeechRequest(text=text, voice="jm_kumo")))
    assert len(chunks) == 2
    gap = np.abs(chunks[0][-int(0.25 * SAMPLE_RATE):]).max()
    assert gap == 0.0  # the sentence gap closes the first chunk
    fast = kokoro.synthesize([SpeechRequest(text=text, voice="jm_kumo", speed=1.5)])[0]
    assert len(fast) < 0.8 * sum(len(c) for c in chunks)


def test_a_sentence_longer_than_the_model_takes_is_cut_into_pieces(kokoro: KokoroEngine) -> None:
    long_phonemes = ", ".join(["ðə kwɪk bɹWn fɑks"] * 80)
    cut = pieces(long_phonemes)
    assert len(cut) > 1
    assert all(len(p) <= MAX_TOKENS for p in cut)
    assert "".join(p.replace(" ", "") for p in cut) == long_phonemes.replace(" ", "")
    assert all(len(p) <= MAX_TOKENS for p in pieces("x" * 1800))
    text = ", ".join(["the quick brown fox jumps over the lazy dog"] * 30) + "."
    audio = kokoro.synthesize([SpeechRequest(text=text, voice="jf_nezumi")])[0]
    assert len(audio) / SAMPLE_RATE > 30  # every piece spoken, none cut off


def test_threads_speak_at_once_beside_piper(kokoro: KokoroEngine) -> None:
    """Kokoro's and Piper's espeak-ng calls share one lock: many threads of both engines at
    once give each Kokoro request the audio length it gives alone (its timing comes from its
    durations, not its noise), and Piper the phonemes it reads alone (Piper's own lengths
    vary from take to take)."""
    from core.catalog import piper_model
    from workers.engines.piper import PiperEngine

    piper = PiperEngine(piper_model("piper"))
    texts = [f"Request number {n} is spoken while others run." for n in range(6)]
    alone = [len(kokoro.synthesize([SpeechRequest(text=t, voice="jf_alpha")])[0])
             for t in texts]
    piper_alone = piper.voice.phonemize(texts[0])
    together: dict[int, int] = {}
    piper_read: list[Any] = []
    errors: list[BaseException] = []

    def speak(n: int) -> None:
        try:
            together[n] = len(kokoro.synthesize([SpeechRequest(text=texts[n],
                                                               voice="jf_alpha")])[0])
        except BaseException as exc:  # reported below
            errors.append(exc)

    def piper_speaks() -> None:
        for _ in range(3):
            piper_read.append(piper.voice.phonemize(texts[0]))
            assert piper.synthesize([SpeechRequest(text=texts[0], voice="joe")])[0].size

    threads = [threading.Thread(target=speak, args=(n,)) for n in range(6)]
    threads.append(threading.Thread(target=piper_speaks))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert [together[n] for n in range(6)] == alone
    assert piper_read == [piper_alone] * 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Process]]:
    with embedded(tmp_path_factory.mktemp("kokoro")) as served:
        yield served


def test_serve_offers_both_engines_voices_by_default(served: tuple[str, Process]) -> None:
    url, _ = served
    voices = httpx.get(f"{url}/v1/audio/voices").json()["voices"]
    by_model: dict[str, list[str]] = {}
    for voice in voices:
        by_model.setdefault(voice["model"], []).append(voice["id"])
    assert by_model == {"piper": ["joe"], "kokoro": list(KOKORO_VOICES)}
    kokoro = httpx.get(f"{url}/v1/models/kokoro").json()
    assert kokoro["engine"] == "kokoro"
    assert kokoro["sample_rate"] == SAMPLE_RATE
    assert "en-US" in kokoro["languages"]


def test_sync_and_streamed_speech_in_a_kokoro_voice(served: tuple[str, Process]) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=120) as http:
        # No model named: the first model that has the voice (as the OpenAI SDK sends it).
        speech = http.post("/v1/audio/speech", json={"input": "Kokoro speaks here.",
                                                     "voice": "jm_kumo",
                                                     "response_format": "wav"})
        assert speech.status_code == 200, speech.text
        seconds, rms = audio_stats(speech.content, "wav")
        assert seconds > 0.8
        assert rms > 0.02
        with http.stream("POST", "/v1/audio/speech", json={
                "model": "kokoro", "voice": "jf_alpha", "response_format": "pcm",
                "input": "The first sentence streams. The second follows it."}) as stream:
            assert stream.status_code == 200
            assert stream.headers["x-sample-rate"] == str(SAMPLE_RATE)
            data = stream.read()
        assert len(data) / 2 / SAMPLE_RATE > 2.0  # 16-bit PCM at the model's rate
        wrong = http.post("/v1/audio/speech", json={"input": "x", "model": "kokoro",
                                                    "voice": "joe"})
        assert wrong.status_code == 400
        assert wrong.json()["error"]["code"] == "voice_not_found"


def test_a_job_with_a_cast_of_kokoro_voices(served: tuple[str, Process]) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=120) as http:
        response = http.post("/v1/audio/jobs", json={
            "model": "kokoro", "voice": "jf_alpha", "input": SCENE, "response_format": "wav",
            "subtitles": ["vtt"], "cast": {"Alice": "jm_kumo", "bob": "jf_nezumi"}})
        assert response.status_code == 202, response.text
        job = wait_job(http, response.json()["id"], timeout=300)
        assert job["status"] == "completed", job
        manifest: dict[str, Any] = http.get(job["result"]["manifest_url"]).json()
        vtt = http.get(f"/v1/audio/jobs/{job['id']}/content",
                       params={"variant": "subtitles_vtt"}).text
        audio = http.get(job["result"]["url"]).content
    assert [(s.get("speaker"), s["voice"]) for s in manifest["segments"]] == [
        (None, "jf_alpha"), ("alice", "jm_kumo"), ("bob", "jf_nezumi"), (None, "jf_alpha"),
        (None, "jf_alpha"), ("alice", "jm_kumo")]
    assert '<v bob>"Only me."' in vtt, vtt  # the cast named bob with no display name
    assert audio_stats(audio, "wav")[0] > 5.0


def test_serve_without_kokoro_offers_piper_alone(tmp_path: Path) -> None:
    with embedded(tmp_path, {"NARRATOR_SERVE_KOKORO": "false"}) as (url, _):
        models = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert models == ["piper"]


def test_japanese_text_to_a_kokoro_without_its_reader_is_a_400() -> None:
    """A Kokoro worker without the `japanese` extra publishes English only; Japanese text
    for it is refused before anything is stored or sent (the engine would fail on it)."""
    from dataclasses import replace

    from api.errors import ApiError
    from api.validation import check_script

    english_only = replace(kokoro_model("kokoro"), languages=("en-US",))
    with pytest.raises(ApiError) as refused:
        check_script(english_only, "今日はいい天気ですね。", None)
    assert refused.value.status_code == 400
    assert refused.value.code == "unsupported_language"
    check_script(english_only, "Plain English.", None)  # accepted
    check_script(kokoro_model("kokoro"), "今日はいい天気ですね。", None)  # this install reads it


def test_a_lexicons_ipa_is_spoken_as_given(kokoro: KokoroEngine) -> None:
    """Lexicon entries given as IPA reach the engine inline (`[[ ... ]]`, as Piper takes
    them); Kokoro speaks them as written, in its own symbols, within their sentence."""
    from core.lexicon import reader_for

    say = reader_for({"lexicon": [{"text": "tomato", "ipa": "təmˈɑːtoʊ"}]}, False)
    spoken = say("I like tomato soup. Yes.")
    assert "[[ təmˈɑːtoʊ ]]" in spoken
    sentences = kokoro._english.sentences(spoken)
    assert len(sentences) == 2
    assert "təmˈɑtO" in sentences[0]
    assert set("təmˈɑːtoʊ") <= set(kokoro.info.phonemes)  # the API accepts the entry
    audio = kokoro.synthesize([SpeechRequest(text=spoken, voice="jf_alpha")])[0]
    assert len(audio) / SAMPLE_RATE > 1.0
