"""Voice consents through the official OpenAI SDK and HTTP: a recording of the speaker reading
the consent statement, heard back before it is stored; per key; deleting one disables its
voices. Real API and Piper worker on Postgres and Redis; Piper reads the "speaker's" part."""

import io
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from openai import BadRequestError, NotFoundError, OpenAI

from core.consent import STATEMENT
from tests.conftest import base_env, error_of, redis_url
from tests.support import Stack, consent_for, registered, start_stack
from tests.test_voices import BASE, clip

KEYS = ("alice-key", "bob-key")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    """API and Piper worker with two API keys, and a GPU worker serving a Base checkpoint as
    the registry shows it (the GPU is elsewhere)."""
    import redis

    redis.Redis.from_url(redis_url(6)).flushdb()
    tmp = tmp_path_factory.mktemp("consents")
    started = start_stack(tmp, base_env(tmp, database_url, 6) | {
        "NARRATOR_API_KEYS": ",".join(KEYS)})
    started.media = tmp / "media"
    with registered(BASE, "gpu-base:consents", redis_url(6)):
        yield started
    started.stop()


def _http(stack: Stack, key: str) -> httpx.Client:
    return stack.client(headers={"Authorization": f"Bearer {key}"})


def _sdk(stack: Stack, key: str) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=key)


def _recording(stack: Stack, text: str = STATEMENT) -> bytes:
    with _http(stack, KEYS[0]) as http:
        spoken = http.post("/v1/audio/speech", json={
            "model": "piper", "voice": "joe", "input": text, "response_format": "wav"})
    spoken.raise_for_status()
    return spoken.content


def _stored(stack: Stack) -> set[Path]:
    assert stack.media is not None
    return set((stack.media / "consents").rglob("*.flac"))


def test_the_sdk_creates_lists_gets_renames_and_deletes_a_consent(stack: Stack) -> None:
    client = _sdk(stack, KEYS[0])
    recording = _recording(stack)
    made = client.audio.voice_consents.create(
        name="Nell Reader", language="en-US", recording=("consent.wav", recording, "audio/wav"))
    assert made.id.startswith("cons_")
    assert made.object == "audio.voice_consent"
    assert (made.name, made.language) == ("Nell Reader", "en-US")
    extra = made.model_extra or {}
    assert extra["statement"] == STATEMENT
    assert extra["word_error_rate"] <= 0.35
    assert "synthetic" in extra["transcript"]
    assert made.id in [c.id for c in client.audio.voice_consents.list()]
    assert client.audio.voice_consents.retrieve(made.id).name == "Nell Reader"
    renamed = client.audio.voice_consents.update(made.id, name="Nell R.")
    assert renamed.name == "Nell R."
    with _http(stack, KEYS[0]) as http:  # the recording, for a person to hear
        kept = http.get(f"/v1/audio/voice_consents/{made.id}/recording")
    assert kept.headers["content-type"] == "audio/flac"
    original = sf.info(io.BytesIO(recording)).duration
    assert abs(sf.info(io.BytesIO(kept.content)).duration - original) < 0.05
    deleted = client.audio.voice_consents.delete(made.id)
    assert deleted.deleted is True
    with pytest.raises(NotFoundError):
        client.audio.voice_consents.retrieve(made.id)


def test_a_recording_that_does_not_say_the_statement_is_refused_and_nothing_stored(
        stack: Stack) -> None:
    before = _stored(stack)
    with _http(stack, KEYS[0]) as http:
        response = consent_for(http, text="I do not agree to anything today, so please stop "
                                          "recording my voice.")
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["code"] == "consent_not_heard"
        assert STATEMENT in error["message"]  # what the speaker must read
        assert http.get("/v1/audio/voice_consents").json()["data"] == []
    assert _stored(stack) == before


@pytest.mark.parametrize(("fields", "data", "status", "code"), [
    ({"language": "de-DE"}, None, 400, "unsupported_language"),
    ({}, b"this is not audio at all" * 100, 400, "invalid_audio"),
    ({}, clip(0.5), 400, "invalid_audio"),
    ({}, b"\0" * (10 * 1024 * 1024 + 10), 413, "file_too_large"),
    ({"name": ""}, None, 400, "invalid_value"),
], ids=["language", "not audio", "too short", "too big", "no name"])
def test_bad_consents_are_refused_and_store_nothing(stack: Stack, fields: dict[str, str],
                                                    data: bytes | None, status: int,
                                                    code: str) -> None:
    before = _stored(stack)
    form = {"name": "Nell", "language": "en"} | fields
    with _http(stack, KEYS[0]) as http:
        response = http.post("/v1/audio/voice_consents", data=form, files={
            "recording": ("c.wav", data if data is not None else _recording(stack), "audio/wav")})
    assert response.status_code == status, response.text
    assert error_of(response)["code"] == code
    assert _stored(stack) == before


def test_a_voice_needs_a_consent_of_its_own_key_and_stops_when_it_is_deleted(
        stack: Stack) -> None:
    with _http(stack, KEYS[0]) as alice, _http(stack, KEYS[1]) as bob:
        consent = consent_for(alice).json()["id"]
        # Another key can neither see, use nor delete it.
        assert bob.get(f"/v1/audio/voice_consents/{consent}").status_code == 404
        assert consent not in [c["id"] for c in bob.get("/v1/audio/voice_consents")
                               .json()["data"]]
        assert bob.delete(f"/v1/audio/voice_consents/{consent}").status_code == 404
        sample = {"audio_sample": ("nell.wav", clip(3.0), "audio/wav")}
        refused = bob.post("/v1/audio/voices", data={"name": "Nell", "consent": consent},
                           files=sample)
        assert refused.status_code == 400
        assert error_of(refused)["code"] == "consent_not_found"
        # Its own key clones the voice under it, and may speak with it.
        voice = _sdk(stack, KEYS[0]).audio.voices.create(
            name="Nell", consent=consent, audio_sample=("nell.wav", clip(3.0), "audio/wav"))
        assert voice.id.startswith("voice_")
        assert (voice.model_extra or {})["consent"] == consent
        job = {"model": "qwen3-tts-0.6b-base", "voice": voice.id, "input": "Hello there."}
        accepted = alice.post("/v1/audio/jobs", json=job)
        assert accepted.status_code in (200, 201, 202), accepted.text
        alice.post(f"/v1/audio/jobs/{accepted.json()['id']}/cancel")
        assert alice.get(f"/v1/audio/voice_consents/{consent}").json()["voices"] == 1
        # Deleting the consent disables the voice: listed as such, refused with a reason.
        gone = alice.delete(f"/v1/audio/voice_consents/{consent}").json()
        assert gone["voices_disabled"] == 1
        listed = {v["id"]: v for v in alice.get("/v1/audio/voices").json()["voices"]}
        assert listed[voice.id]["disabled"] is True
        for path, body in (("/v1/audio/jobs", job), ("/v1/audio/speech", job)):
            response = alice.post(path, json=body)
            assert response.status_code == 400, (path, response.text)
            assert error_of(response)["code"] == "voice_disabled"
        with pytest.raises(BadRequestError):
            _sdk(stack, KEYS[0]).audio.speech.create(
                model="qwen3-tts-0.6b-base", voice=voice.id, input="Hello there.")


def test_consents_recorded_at_once_are_each_heard_and_kept(stack: Stack) -> None:
    recording = _recording(stack)
    answers: list[httpx.Response] = []

    def post() -> None:
        with _http(stack, KEYS[1]) as http:
            answers.append(http.post(
                "/v1/audio/voice_consents", data={"name": "At once", "language": "en"},
                files={"recording": ("c.wav", recording, "audio/wav")}))

    threads = [threading.Thread(target=post) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 4
    with _http(stack, KEYS[1]) as http:
        listed = {c["id"] for c in http.get("/v1/audio/voice_consents").json()["data"]}
    assert ids <= listed


@pytest.fixture
def worker_settings(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process reads the stack's database and media as its workers do."""
    import models.db
    import models.settings
    import storage.media
    import storage.settings

    caches = (models.settings.get_settings, storage.settings.get_settings,
              storage.media.store_for)
    monkeypatch.setenv("NARRATOR_DATABASE_URL", stack.env["NARRATOR_DATABASE_URL"])
    monkeypatch.setenv("NARRATOR_DATA_DIR", stack.env["NARRATOR_DATA_DIR"])
    for cache in caches:
        cache.cache_clear()
    models.db.reset_sessionmaker()
    yield
    for cache in caches:
        cache.cache_clear()
    models.db.reset_sessionmaker()


def test_a_worker_stops_cloning_a_voice_once_its_consent_is_deleted(
        stack: Stack, worker_settings: None) -> None:
    """A job accepted before the consent was deleted fails at its next segment."""
    from workers.voices import load_reference

    with _http(stack, KEYS[0]) as alice:
        consent = consent_for(alice).json()["id"]
        voice = alice.post("/v1/audio/voices", data={"name": "Nell", "consent": consent},
                           files={"audio_sample": ("n.wav", clip(3.0), "audio/wav")}).json()
        reference = load_reference(voice["id"])
        assert reference is not None
        assert abs(len(reference.samples) / reference.sample_rate - 3.0) < 0.01
        alice.delete(f"/v1/audio/voice_consents/{consent}").raise_for_status()
    with pytest.raises(ValueError, match="consent was deleted"):
        load_reference(voice["id"])
