"""Every output says it is synthetic, in its container's own metadata, read back with
mutagen and with FFmpeg (PyAV): sync answers, a streamed WAV's header and a job's files."""

import io
from typing import Any

import av
import numpy as np
import pytest
from mutagen import File as MutagenFile

from core.audio import decode, encode
from core.marking import STATEMENT, Provenance, mark_bytes, mark_file, riff_info
from tests.support import Stack, wait_job

MADE = Provenance("kokoro", "jm_kumo", "job_0123")


def ffmpeg_metadata(data: bytes) -> dict[str, str]:
    """The container's and the audio stream's metadata as FFmpeg reads them."""
    with av.open(io.BytesIO(data)) as container:
        return dict(container.metadata) | dict(container.streams.audio[0].metadata)


def assert_marked(data: bytes, fmt: str, made: Provenance) -> None:
    """The fields of `made` and the statement are in `data`, as each reader sees them."""
    found = ffmpeg_metadata(data)
    if fmt == "wav":  # RIFF INFO: FFmpeg maps ICMT to comment, ISFT to encoder
        assert found["comment"].startswith(STATEMENT)
        assert f"model={made.model}; voice={made.voice}" in found["comment"]
        assert found["encoder"].startswith("Narrator")
        return
    for key, value in made.fields().items():
        assert found[key] == value, (fmt, key, found)
    tags: Any = MutagenFile(io.BytesIO(data)).tags
    if fmt == "m4b":
        assert bytes(tags["----:org.narrator:AI_GENERATED"][0]) == b"true"
        assert tags["\xa9too"][0].startswith("Narrator")
    elif fmt == "mp3":
        assert tags["TXXX:AI_GENERATED"].text == ["true"]
        assert tags["COMM:AI-generated:eng"].text[0].startswith(STATEMENT)
    else:
        assert tags["AI_GENERATED"] == ["true"]
        assert tags["COMMENT"][0].startswith(STATEMENT)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus"])
def test_each_format_carries_the_marks_and_the_same_audio(fmt: str) -> None:
    audio = (0.2 * np.sin(np.arange(24000) / 9)).astype(np.float32)
    plain = encode(audio, 24000, fmt)
    marked = mark_bytes(plain, fmt, MADE)
    assert_marked(marked, fmt, MADE)
    assert np.array_equal(decode(plain)[0], decode(marked)[0])


def test_formats_without_metadata_are_left_as_they_are() -> None:
    audio = np.zeros(2400, dtype=np.float32)
    for fmt in ("pcm", "aac"):
        data = encode(audio, 24000, fmt)
        assert mark_bytes(data, fmt, MADE) == data


def test_a_wav_file_gets_info_and_id3_without_its_samples_rewritten(tmp_path: Any) -> None:
    audio = (0.2 * np.sin(np.arange(48001) / 7)).astype(np.float32)
    path = tmp_path / "book.wav"
    path.write_bytes(encode(audio, 24000, "wav"))
    before = path.read_bytes()
    mark_file(path, "wav", MADE)
    after = path.read_bytes()
    assert after[8:len(before)] == before[8:]  # appended: the samples stay where they were
    assert_marked(after, "wav", MADE)
    tags: Any = MutagenFile(path).tags
    assert tags["TXXX:JOB_ID"].text == ["job_0123"]
    assert np.array_equal(decode(before)[0], decode(after)[0])


def test_the_info_chunk_keeps_riff_alignment() -> None:
    for voice in ("a", "ab", "abc"):  # odd and even text lengths
        chunk = riff_info(Provenance("m", voice))
        assert len(chunk) % 2 == 0
        assert int.from_bytes(chunk[4:8], "little") == len(chunk) - 8


def test_sync_answers_streamed_wav_and_job_files_are_marked(local_stack: Stack) -> None:
    with local_stack.client() as http:
        for fmt in ("mp3", "wav", "flac", "opus"):
            answer = http.post("/v1/audio/speech", json={"input": "Marked as synthetic.",
                                                         "response_format": fmt})
            assert answer.status_code == 200, answer.text
            assert_marked(answer.content, fmt, Provenance("piper", "joe"))
        with http.stream("POST", "/v1/audio/speech", json={
                "input": "Streamed, and marked.", "response_format": "wav",
                "stream_format": "audio"}) as stream:
            streamed = stream.read()
        assert b"LIST" in streamed[:400]
        assert_marked(streamed, "wav", Provenance("piper", "joe"))
        for fmt in ("mp3", "m4b", "wav"):
            job = http.post("/v1/audio/jobs", json={
                "response_format": fmt,
                "chapters": [{"title": "One", "input": "The first."},
                             {"title": "Two", "input": "The second."}]}).json()
            job = wait_job(http, job["id"])
            assert job["status"] == "completed", job
            made = Provenance("piper", "joe", job["id"])
            assert_marked(http.get(job["result"]["url"]).content, fmt, made)
            for chapter in job["result"]["chapters"]:
                assert_marked(http.get(chapter["url"]).content, fmt, made)
