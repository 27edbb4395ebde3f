"""Audio encoding: one streaming encoder per response format.

libsndfile (soundfile) writes WAV, FLAC, MP3 and Ogg/Opus; PyAV (bundled ffmpeg) writes AAC.
Every encoder takes an iterator of float32 blocks, so long audio never sits in memory whole.
"""

import io
import tempfile
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

if TYPE_CHECKING:
    from av.container.core import Chapter

from core.formats import CONTENT_TYPES, EXTENSIONS

Audio = npt.NDArray[np.float32]  # mono float32 in [-1, 1]

__all__ = ["CONTENT_TYPES", "EXTENSIONS", "decode", "encode", "encode_to"]

_SNDFILE = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
# libsndfile's Ogg writer crashes on very large single writes: feed it bounded blocks.
MAX_BLOCK_SECONDS = 10

Sink = str | Path | IO[bytes] | int  # int: an open file descriptor, left open


def to_pcm16(audio: Audio) -> bytes:
    """Convert float audio in [-1, 1] to 16-bit little-endian PCM bytes."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _bounded(blocks: Iterable[Audio], rate: int) -> Iterator[Audio]:
    step = rate * MAX_BLOCK_SECONDS
    for block in blocks:
        for start in range(0, len(block), step):
            yield block[start : start + step]


def opus_rate(rate: int) -> int:
    """Return the Opus rate to resample to: the input rate if Opus takes it, else 24 or 48 kHz."""
    return rate if rate in OPUS_RATES else (24000 if rate <= 24000 else 48000)


def _resampled(blocks: Iterable[Audio], rate: int, target: int) -> Iterator[Audio]:
    if rate == target:
        yield from blocks
        return
    stream = soxr.ResampleStream(rate, target, 1, dtype="float32", quality="HQ")
    for block in blocks:
        yield stream.resample_chunk(block)
    yield stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)


Mark = tuple[str, float, float]  # a chapter: title, start and end in seconds


def chapter_entries(marks: list[Mark]) -> "list[Chapter]":
    """Chapter marks as PyAV's `set_chapters` takes them (milliseconds)."""
    return [{"id": n, "start": round(start * 1000), "end": round(end * 1000),
             "time_base": Fraction(1, 1000), "metadata": {"title": title}}
            for n, (title, start, end) in enumerate(marks)]


def _encode_aac(blocks: Iterable[Audio], rate: int, sink: Sink, container_format: str = "adts",
                marks: list[Mark] | None = None) -> None:
    import av  # imported here: GPU workers write parts as float WAV and need no ffmpeg

    with av.open(sink, mode="w", format=container_format) as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        for block in blocks:
            pcm = (np.clip(block, -1.0, 1.0) * 32767.0).astype(np.int16).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
            frame.sample_rate = rate
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        if marks:
            container.set_chapters(chapter_entries(marks))


def encode_to(blocks: Iterable[Audio], rate: int, fmt: str, sink: Sink,
              marks: list[Mark] | None = None, *, out_rate: int | None = None,
              cbr_kbps: int | None = None) -> None:
    """Encode float32 blocks at `rate` into `fmt`, written to a path or binary file.

    `marks` are chapter marks, written by formats that hold them (m4b). `out_rate`: resample
    to it as the blocks go by. `cbr_kbps`: MP3 at that constant bitrate (else LAME's VBR).
    """
    if out_rate is not None and out_rate != rate:
        blocks, rate = _resampled(_bounded(blocks, rate), rate, out_rate), out_rate
    blocks = _bounded(blocks, rate)
    if fmt == "pcm":
        out = open(sink, "wb", closefd=not isinstance(sink, int)) \
            if isinstance(sink, str | Path | int) else sink  # noqa: SIM115
        try:
            for block in blocks:
                out.write(to_pcm16(block))
        finally:
            if out is not sink:
                out.close()
        return
    if fmt == "aac":
        _encode_aac(blocks, rate, sink)
        return
    if fmt == "m4b":  # AAC in an MPEG-4 audiobook container, with chapter marks
        _encode_aac(blocks, rate, sink, "ipod", marks)
        return
    container, subtype = _SNDFILE[fmt]
    if fmt == "opus":
        target = opus_rate(rate)
        blocks, rate = _bounded(_resampled(blocks, rate, target), target), target
    # libsndfile sets a constant MP3 bitrate from its compression level: 320 - level * 288.
    constant = {"bitrate_mode": "CONSTANT", "compression_level": (320 - cbr_kbps) / 288} \
        if fmt == "mp3" and cbr_kbps else {}
    with sf.SoundFile(sink, mode="w", samplerate=rate, channels=1, format=container,
                      subtype=subtype, closefd=False, **constant) as f:
        for block in blocks:
            f.write(block)


def encode(audio: Audio, rate: int, fmt: str) -> bytes:
    """Encode one array in memory (sync responses, MP3 and AAC fragments).

    libsndfile's formats are written to a temporary file's descriptor, not to a BytesIO:
    given a Python file object, libsndfile calls back into Python for every write (835
    calls for 20 s of MP3), and each call must take the GIL again. Beside two threads running
    Python, one 20 s MP3 then took 5.9-6.5 s, and 0.18-0.19 s through the descriptor, where
    the encoder never needs the GIL (bench.fragments). On two H100s the assembly worker's
    32 threads each took 1.1-1.4 s per fragment against 0.3 s alone (docs/deployment.md, One
    host, several GPUs). The bytes are the same (tests/test_audio.py).
    """
    if fmt not in _SNDFILE:  # PCM and AAC: no callbacks
        buffer = io.BytesIO()
        encode_to([audio], rate, fmt, buffer)
        return buffer.getvalue()
    with tempfile.TemporaryFile() as file:
        encode_to([audio], rate, fmt, file.fileno())
        file.seek(0)
        return file.read()


def decode(data: bytes | Sink) -> tuple[Audio, int]:
    """Decode any container PyAV knows into mono float32 and its sample rate."""
    import av

    source = io.BytesIO(data) if isinstance(data, bytes) else data
    with av.open(source, mode="r") as container:
        stream = container.streams.audio[0]
        rate = int(stream.rate or stream.codec_context.sample_rate)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        parts = [
            out.to_ndarray().reshape(-1)
            for frame in container.decode(stream)
            for out in resampler.resample(frame)
        ]
    audio = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    return audio, rate


def loudness_normalize(audio: Audio, rate: int, target_lufs: float = -16.0,
                       knee: float = 0.9, max_gain_db: float = 20.0) -> Audio:
    """Scale to `target_lufs` integrated loudness (ITU-R BS.1770, pyloudnorm).

    Speech peaks would clip at podcast loudness, so samples above `knee` are bent smoothly
    toward full scale (a soft limiter) instead. Clips shorter than one 400 ms gating block,
    and silent ones, are returned unchanged.
    """
    import pyloudnorm

    if len(audio) < int(0.4 * rate) + 1:
        return audio
    loudness = pyloudnorm.Meter(rate).integrated_loudness(audio.astype(np.float64))
    if not np.isfinite(loudness):
        return audio
    gain = 10 ** (min(target_lufs - loudness, max_gain_db) / 20)
    scaled = audio.astype(np.float32) * np.float32(gain)
    over = np.abs(scaled) > knee
    if over.any():
        excess = (np.abs(scaled[over]) - knee) / (1 - knee)
        scaled[over] = np.sign(scaled[over]) * (knee + (1 - knee) * np.tanh(excess))
    return scaled


def fade_edges(audio: Audio, rate: int, seconds: float = 0.005) -> Audio:
    """Fade the first and last few milliseconds, so joins make no clicks."""
    n = min(int(seconds * rate), len(audio) // 2)
    if n == 0:
        return audio
    out = audio.copy()
    ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
    out[:n] *= ramp
    out[-n:] *= ramp[::-1]
    return out
