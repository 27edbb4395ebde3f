"""Streamed sync speech through the real queue and worker, with Piper (one chunk a sentence)."""

import base64
import json
import struct

import numpy as np

from tests.conftest import error_of
from tests.support import Stack

TEXT = ("The first sentence arrives on its own. The second follows it. "
        "A third one closes the stream.")


def test_sse_sends_deltas_then_done_with_usage(local_stack: Stack) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse"}
    events = []
    with local_stack.client() as http, http.stream("POST", "/v1/audio/speech",
                                                    json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        rate = int(response.headers["x-sample-rate"])
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) == 3  # one per sentence: the audio left the worker as it was made
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    seconds = len(pcm) / 2 / rate
    assert abs(seconds - events[-1]["usage"]["audio_seconds"]) < 0.001
    assert events[-1]["usage"]["input_characters"] == len(TEXT)
    assert float(np.abs(np.frombuffer(pcm, "<i2")).mean()) > 300


def test_audio_stream_of_pcm_arrives_in_chunks(local_stack: Stack) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "audio"}
    with local_stack.client() as http, http.stream("POST", "/v1/audio/speech",
                                                    json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/pcm"
        chunks = [c for c in response.iter_raw() if c]
    data = b"".join(chunks)
    assert len(chunks) >= 2
    assert len(data) % 2 == 0
    assert len(data) / 2 / 22050 > 3.0


def test_wav_stream_has_an_open_ended_header(local_stack: Stack) -> None:
    body = {"input": TEXT, "response_format": "wav", "stream_format": "audio"}
    with local_stack.client() as http:
        data = http.post("/v1/audio/speech", json=body).content
    assert data[:4] == b"RIFF"
    assert data[8:16] == b"WAVEfmt "
    channels, rate = struct.unpack("<HI", data[22:28])
    assert (channels, rate) == (1, 22050)
    # Then the marks that the audio is synthetic (MARK_OUTPUT, on by default: a LIST/INFO
    # chunk, tests/test_marking.py), then the samples' chunk of unknown size.
    assert data[36:40] == b"LIST"
    at = 44 + struct.unpack("<I", data[40:44])[0]
    assert data[at:at + 4] == b"data"
    assert struct.unpack("<I", data[at + 4:at + 8])[0] == 0xFFFFFFFF
    samples = np.frombuffer(data[at + 8:], "<i2")
    assert len(samples) / rate > 3.0


def test_streaming_a_compressed_format_is_a_clear_400(local_stack: Stack) -> None:
    with local_stack.client() as http:
        response = http.post("/v1/audio/speech", json={
            "input": "Hi.", "response_format": "mp3", "stream_format": "sse"})
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "response_format"
    assert "pcm" in error["message"]
