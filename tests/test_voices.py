"""The voice library: upload a reference clip under a consent, list it, use it for a Base
model, delete it (consents themselves: tests/test_consents.py)."""

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import error_of, redis_url
from tests.support import Stack, consent_for, registered

BASE = Path(__file__).parent / "data" / "qwen3-tts-0.6b-base"
MODEL_ID = "qwen3-tts-0.6b-base"


def clip(seconds: float, fmt: str = "WAV", amplitude: float = 0.3) -> bytes:
    rate = 24000
    t = np.arange(int(seconds * rate)) / rate
    audio = (amplitude * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2)
    buffer = io.BytesIO()
    sf.write(buffer, audio.astype(np.float32), rate, format=fmt)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def base_model(local_stack: Stack) -> Iterator[None]:
    """A GPU worker serving a Base checkpoint, as the registry shows it (the GPU is elsewhere)."""
    with registered(BASE, "gpu-base:1", redis_url(11)):
        yield


@pytest.fixture(scope="module")
def consent(local_stack: Stack) -> str:
    """A voice consent of the stack's (keyless) owner."""
    with local_stack.client() as http:
        response = consent_for(http)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def upload(stack: Stack, data: bytes, consent: str, **fields: str) -> object:
    form = {"name": "Narrator Nell", "consent": consent, "ref_text": "This is my voice."} | fields
    with stack.client() as http:
        return http.post("/v1/audio/voices", data=form,
                         files={"audio_sample": ("nell.wav", data, "audio/wav")})


def test_upload_without_a_cloning_model_is_a_clear_400(local_stack: Stack, consent: str) -> None:
    # Runs first in this module: no Base worker is registered yet.
    response = upload(local_stack, clip(3.0), consent)
    assert response.status_code == 400  # type: ignore[attr-defined]
    assert "Base checkpoint" in error_of(response)["message"]


def test_upload_list_use_and_delete(local_stack: Stack, base_model: None, consent: str) -> None:
    response = upload(local_stack, clip(3.0), consent)
    assert response.status_code == 201, response.text  # type: ignore[attr-defined]
    voice = response.json()  # type: ignore[attr-defined]
    assert voice["id"].startswith("voice_")
    assert voice["model"] == MODEL_ID
    assert voice["kind"] == "uploaded"
    assert voice["consent"] == consent
    assert voice["disabled"] is False
    assert abs(voice["duration_seconds"] - 3.0) < 0.01
    assert local_stack.media is not None
    stored = list((local_stack.media / "voices").glob("*/reference.flac"))
    assert any(sf.info(str(p)).duration > 2.9 for p in stored)
    with local_stack.client() as http:
        listed = http.get("/v1/audio/voices").json()["voices"]
        assert {"id": voice["id"], "name": "Narrator Nell", "model": MODEL_ID,
                "languages": voice["languages"], "kind": "uploaded", "disabled": False} in listed
        wrong = http.post("/v1/audio/jobs", json={"model": MODEL_ID, "voice": "voice_nope",
                                                  "input": "Hello."})
        assert wrong.status_code == 400
        assert voice["id"] in error_of(wrong)["message"]
        deleted = http.delete(f"/v1/audio/voices/{voice['id']}")
        assert deleted.json()["deleted"] is True
        assert http.delete(f"/v1/audio/voices/{voice['id']}").status_code == 404
        assert voice["id"] not in {v["id"] for v in http.get("/v1/audio/voices").json()["voices"]}


@pytest.mark.parametrize(("data", "fields", "status", "words"), [
    (b"this is not audio at all" * 100, {}, 400, "not an audio file"),
    (clip(0.5), {}, 400, "1 to 30 s"),
    (clip(31.0), {}, 400, "1 to 30 s"),
    (clip(3.0, amplitude=0.0), {}, 400, "silent"),
    (clip(3.0), {"consent": ""}, 400, "consent"),
    (clip(3.0), {"consent": "I am the speaker and I consent."}, 400, "no voice consent"),
    (clip(3.0), {"consent": "cons_" + "0" * 32}, 400, "no voice consent"),
    (clip(3.0), {"model": "piper"}, 400, "Base"),
    (b"\0" * (10 * 1024 * 1024 + 10), {}, 413, "10 MB"),
], ids=["not audio", "too short", "too long", "silent", "no consent", "consent as text",
        "unknown consent", "model cannot clone", "too big"])
def test_bad_uploads_are_refused_and_store_nothing(local_stack: Stack, base_model: None,
                                                   consent: str, data: bytes,
                                                   fields: dict[str, str], status: int,
                                                   words: str) -> None:
    assert local_stack.media is not None
    before = set((local_stack.media / "voices").rglob("*")) \
        if (local_stack.media / "voices").exists() else set()
    extra = dict(fields)
    response = upload(local_stack, data, extra.pop("consent", consent), **extra)
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert words in error_of(response)["message"]
    after = set((local_stack.media / "voices").rglob("*")) \
        if (local_stack.media / "voices").exists() else set()
    assert after == before
