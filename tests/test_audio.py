"""Every response format encodes and decodes back to the same duration."""

import numpy as np
import pytest

from workers.audio import decode, encode, encode_to, opus_rate


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus", "aac"])
def test_encoded_audio_decodes_to_the_same_duration(fmt: str) -> None:
    audio, rate = decode(encode(tone(2.0, 22050), 22050, fmt))
    # AAC adds encoder priming and pads to 1024-sample frames: up to ~0.1 s at 22.05 kHz.
    assert abs(len(audio) / rate - 2.0) < 0.1
    assert 0.3 < float(np.sqrt(np.mean(audio**2))) < 0.4


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

    from workers.audio import loudness_normalize

    quiet = (tone(5.0, 24000) * 0.05).astype(np.float32)
    out = loudness_normalize(quiet, 24000, -16.0)
    assert abs(pyloudnorm.Meter(24000).integrated_loudness(out.astype(np.float64)) + 16) < 0.2
    loud = np.sign(tone(5.0, 24000)).astype(np.float32)  # a square wave at full scale
    assert float(np.max(np.abs(loudness_normalize(loud, 24000, 0.0)))) < 1.0
    short = tone(0.2, 24000)
    assert loudness_normalize(short, 24000) is short


def test_fade_edges_start_and_end_at_zero() -> None:
    from workers.audio import fade_edges

    faded = fade_edges(np.ones(24000, dtype=np.float32), 24000)
    assert faded[0] == 0.0
    assert faded[-1] == 0.0
    assert faded[12000] == 1.0
