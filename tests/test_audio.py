"""Every response format encodes and decodes back to the same duration."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from core.audio import decode, encode, encode_to, opus_rate


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus", "aac"])
def test_encoded_audio_decodes_to_the_same_duration(fmt: str) -> None:
    audio, rate = decode(encode(tone(2.0, 22050), 22050, fmt))
    # AAC adds encoder priming and pads to 1024-sample frames: up to ~0.1 s at 22.05 kHz.
    assert abs(len(audio) / rate - 2.0) < 0.1
    assert 0.3 < float(np.sqrt(np.mean(audio**2))) < 0.4


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_in_memory_encodes_match_a_streamed_one_and_run_on_threads_at_once(fmt: str) -> None:
    """encode() writes libsndfile's formats through a temporary file's descriptor (no Python
    callback per write, so no wait for the GIL per write): the bytes are the ones a stream
    gets, also with eight threads encoding at once (each has a file of its own)."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    audio = tone(20.0, 24000)
    streamed = io.BytesIO()
    encode_to([audio], 24000, fmt, streamed)
    assert encode(audio, 24000, fmt) == streamed.getvalue()
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda _: encode(audio, 24000, fmt), range(16)))
    assert all(data == streamed.getvalue() for data in together)


def test_pcm_is_raw_16_bit_little_endian() -> None:
    data = encode(tone(1.0, 22050), 22050, "pcm")
    assert len(data) == 22050 * 2
    samples = np.frombuffer(data, "<i2")
    assert samples.max() > 16000


def test_opus_resamples_to_a_rate_opus_supports() -> None:
    assert opus_rate(22050) == 24000
    assert opus_rate(24000) == 24000
    assert opus_rate(44100) == 48000


def test_long_ogg_opus_is_written_in_blocks(tmp_path: object) -> None:
    path = f"{tmp_path}/long.ogg"
    encode_to([tone(150.0, 24000)], 24000, "opus", path)
    audio, rate = decode(path)
    assert abs(len(audio) / rate - 150.0) < 0.1


def test_loudness_normalize_reaches_the_target_without_clipping() -> None:
    import pyloudnorm

    from core.audio import loudness_normalize

    quiet = (tone(5.0, 24000) * 0.05).astype(np.float32)
    out = loudness_normalize(quiet, 24000, -16.0)
    assert abs(pyloudnorm.Meter(24000).integrated_loudness(out.astype(np.float64)) + 16) < 0.2
    loud = np.sign(tone(5.0, 24000)).astype(np.float32)  # a square wave at full scale
    assert float(np.max(np.abs(loudness_normalize(loud, 24000, 0.0)))) < 1.0
    short = tone(0.2, 24000)
    assert loudness_normalize(short, 24000) is short


def test_fade_edges_start_and_end_at_zero() -> None:
    from core.audio import fade_edges

    faded = fade_edges(np.ones(24000, dtype=np.float32), 24000)
    assert faded[0] == 0.0
    assert faded[-1] == 0.0
    assert faded[12000] == 1.0


def _book(chapters: list[int]) -> tuple[list[Any], Any]:
    from models import Segment
    from workers.book.timeline import Timeline

    segments = [Segment(index=n, chapter=c, text="x", samples=2400, pause_after=0.1)
                for n, c in enumerate(chapters)]
    return segments, Timeline(segments, 24000)


def test_one_read_of_the_parts_feeds_the_book_and_each_chapter(tmp_path: Path) -> None:
    from workers.book.assembly import _encode

    segments, timeline = _book([0, 0, 1])
    blocks = (np.full(2400, 0.1 * (n + 1), np.float32) for n in range(3))
    files = [tmp_path / "c0.wav", tmp_path / "c1.wav"]
    _encode(segments, blocks, timeline, "wav", tmp_path / "book.wav", [], files)
    book, _ = sf.read(tmp_path / "book.wav", dtype="float32")
    first, _ = sf.read(files[0], dtype="float32")
    second, _ = sf.read(files[1], dtype="float32")
    assert len(book) == timeline.total == 3 * 2400 + 2 * 2400  # two 0.1 s gaps
    assert len(first) == 2 * 2400 + 2400  # its inner gap only
    assert len(second) == 2400
    assert abs(float(second.mean()) - 0.3) < 1e-3


def test_a_failing_read_or_encoder_raises_instead_of_hanging(tmp_path: Path) -> None:
    from workers.book.assembly import _encode

    segments, timeline = _book([0] * 40 + [1] * 40)

    def broken() -> Iterator[Any]:
        for _ in range(30):
            yield np.zeros(2400, np.float32)
        raise OSError("part missing")

    with pytest.raises(OSError, match="part missing"):
        _encode(segments, broken(), timeline, "wav", tmp_path / "a.wav", [],
                [tmp_path / "c0.wav", tmp_path / "c1.wav"])
    blocks = (np.zeros(2400, np.float32) for _ in range(80))
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the encoder raises
        _encode(segments, blocks, timeline, "wav", tmp_path / "missing" / "a.wav", [], [])
