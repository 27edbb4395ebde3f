"""Sync speech through the official OpenAI SDK, a real worker and real Piper."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.support import Stack, audio_stats, start_stack

TEXT = "Narrator speaks through the official OpenAI client. Every format must work."


@pytest.fixture(scope="module")
def client(local_stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{local_stack.url}/v1", api_key="unused")


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_openai_sdk_round_trip_in_every_format(client: openai.OpenAI, fmt: str) -> None:
    response = client.audio.speech.with_raw_response.create(
        model="piper", voice="joe", input=TEXT, response_format=fmt)  # type: ignore[arg-type]
    data = response.content
    rate = int(response.headers["x-sample-rate"])
    declared = float(response.headers["x-audio-duration"])
    duration, rms = audio_stats(data, fmt, rate)
    assert rate == 22050
    assert response.headers["x-request-id"].startswith("req_")
    assert 3.0 < declared < 10.0
    assert abs(duration - declared) < 0.12  # codecs pad to their frame sizes
    assert rms > 0.02, "the audio is silent"


def test_speed_changes_the_duration(client: openai.OpenAI) -> None:
    normal = client.audio.speech.with_raw_response.create(
        model="piper", voice="joe", input=TEXT, response_format="wav")
    fast = client.audio.speech.with_raw_response.create(
        model="piper", voice="joe", input=TEXT, response_format="wav", speed=2.0)
    ratio = float(fast.headers["x-audio-duration"]) / float(normal.headers["x-audio-duration"])
    assert 0.4 < ratio < 0.75


def test_voice_as_an_object_and_the_default_model(local_stack: Stack) -> None:
    with local_stack.client() as http:
        response = http.post("/v1/audio/speech", json={"input": "Hello.", "voice": {"id": "joe"},
                                                       "response_format": "wav"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"


def test_models_and_voices_are_listed(client: openai.OpenAI, local_stack: Stack) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["piper"]
    assert client.models.retrieve("piper").id == "piper"
    with local_stack.client() as http:
        voices = http.get("/v1/audio/voices").json()["voices"]
    assert voices == [{"id": "joe", "name": voices[0]["name"], "model": "piper",
                       "languages": ["en-US"], "kind": "builtin"}]


def test_a_sync_request_waits_for_a_worker_that_starts_later(tmp_path: Path,
                                                             database_url: str) -> None:
    """The API waits on its Redis channel for as long as SYNC_TIMEOUT_SECONDS, however long
    the first frame takes (redis-py 8's default 5 s socket timeout once cut this short)."""
    import redis

    from tests.conftest import base_env, redis_url

    redis.Redis.from_url(redis_url(3)).flushdb()
    stack = start_stack(tmp_path, base_env(tmp_path, database_url, 3), worker=False)
    try:
        with ThreadPoolExecutor(1) as pool, stack.client() as http:
            answer = pool.submit(http.post, "/v1/audio/speech", json={
                "input": "Worth the wait.", "response_format": "wav"})
            time.sleep(6)  # longer than any socket timeout on the way
            assert not answer.done()
            stack.worker.start()
            response = answer.result(timeout=120)
    finally:
        stack.stop()
    assert response.status_code == 200, response.text
    seconds, _ = audio_stats(response.content, "wav")
    assert seconds > 0.5
