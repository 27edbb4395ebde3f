"""ACX mastering (`mastering: "acx"`): audiobook files as ACX (Audible) takes them, measured.

ACX's requirements for each chapter file: RMS between -23 and -18 dB, peaks at most -3 dBFS,
a noise floor at most -60 dB RMS, 0.5-1 s of room tone at the start and 1-5 s at the end,
and 44.1 kHz, 192 kbps constant-bitrate MP3. Each part is brought to the RMS that puts its
chapter's file at TARGET_RMS_DB (target_db), its peaks held under CEILING_DB by a look-ahead
limiter; every silence (room tone, and the gaps
between segments) is a faint noise at ROOM_TONE_DB rather than digital zero; the encoder
resamples to 44.1 kHz and writes CBR. Each file is then decoded and measured, and the
manifest reports its figures against the profile.
"""

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.audio import Audio, decode

RATE, KBPS = 44100, 192
RMS_RANGE, PEAK_MAX, NOISE_MAX = (-23.0, -18.0), -3.0, -60.0
LEAD_RANGE, TAIL_RANGE = (0.5, 1.0), (1.0, 5.0)
TARGET_RMS_DB = -20.0  # the middle of ACX's range
CEILING_DB = -3.8  # under -3 dBFS, with room for resampling and MP3's overshoot
ROOM_TONE_DB = -75.0
LEAD_SECONDS, TAIL_SECONDS = 0.6, 2.0  # plus whatever quiet the first and last parts have
SPEECH_DB = -50.0  # a 20 ms window louder than this is sound, for the room-tone measures


def _db(value: float) -> float:
    return round(max(-120.0, 20 * float(np.log10(max(value, 1e-9)))), 2)


def target_db(speech: int, length: int) -> float:
    """Return the RMS a chapter's parts are brought to so that its whole file, `speech`
    samples of parts in `length` samples of file (the rest room tone), is at TARGET_RMS_DB:
    a short chapter is mostly room tone, which ACX's whole-file RMS counts (at most +6 dB)."""
    return TARGET_RMS_DB + min(6.0, 10 * float(np.log10(max(length, 1) / max(speech, 1))))


def level(audio: Audio, rate: int, target: float = TARGET_RMS_DB) -> Audio:
    """Bring a part to `target` dB RMS and hold its peaks under CEILING_DB.

    The limiter takes some of the level back (more, the louder the target against the
    speech's peaks), so the gain is raised and the limiter run again until the RMS is within
    0.1 dB of the target (three more passes at most; +20 dB at most in all).
    """
    x = np.asarray(audio, dtype=np.float32)
    rms = _rms(x)
    if rms < 1e-6:
        return x
    gain, out = 10 ** ((target - 20 * np.log10(rms)) / 20), x
    for _ in range(4):
        out = _limited(x * np.float32(min(gain, 10.0)), rate)
        miss = target - 20 * np.log10(max(_rms(out), 1e-9))
        if abs(miss) < 0.1 or gain >= 10.0:
            break
        gain *= 10 ** (miss / 20)
    return out


def _rms(x: Audio) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


def _limited(x: Audio, rate: int) -> Audio:
    """Hold peaks under CEILING_DB with a 5 ms look-ahead gain (scipy's filters)."""
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    ceiling = 10 ** (CEILING_DB / 20)
    need = np.minimum(1.0, ceiling / np.maximum(np.abs(x), 1e-9))
    w = max(1, int(0.005 * rate))  # the gain falls before a peak and recovers after it
    # The minimum over +-w, averaged over +-w/2, never exceeds the gain any sample needs.
    gain = uniform_filter1d(minimum_filter1d(need, 2 * w + 1), w + 1)
    return np.asarray(np.clip(x * gain.astype(np.float32), -ceiling, ceiling), dtype=np.float32)


class RoomTone:
    """Faint noise for every silence of a mastered file (the same noise for a given length)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.bed = (self.rng.standard_normal(RATE * 4) * 10 ** (ROOM_TONE_DB / 20)
                    ).astype(np.float32)

    def __call__(self, samples: int) -> Audio:
        """Return `samples` of room tone."""
        reps = -(-samples // len(self.bed)) if samples else 0
        return np.tile(self.bed, max(reps, 1))[:samples]


@dataclass(frozen=True)
class Figures:
    """One file's measured figures."""

    rms_db: float
    peak_db: float
    noise_floor_db: float
    lead_seconds: float
    tail_seconds: float
    sample_rate: int
    kbps: int
    constant_bitrate: bool

    def report(self) -> dict[str, Any]:
        """Return the figures, each check against the profile, and whether all pass."""
        checks = {
            "rms": RMS_RANGE[0] <= self.rms_db <= RMS_RANGE[1],
            "peak": self.peak_db <= PEAK_MAX,
            "noise_floor": self.noise_floor_db <= NOISE_MAX,
            "lead": LEAD_RANGE[0] <= self.lead_seconds <= LEAD_RANGE[1],
            "tail": TAIL_RANGE[0] <= self.tail_seconds <= TAIL_RANGE[1],
            "format": self.sample_rate == RATE and self.kbps == KBPS and self.constant_bitrate,
        }
        return {**self.__dict__, "checks": checks, "ok": all(checks.values())}


def measure(path: Path) -> Figures:
    """Decode an MP3 file and measure it as ACX does."""
    from mutagen.mp3 import MP3, BitrateMode

    data = path.read_bytes()
    audio, rate = decode(data)
    info = MP3(io.BytesIO(data)).info
    assert info is not None
    x = np.asarray(audio, dtype=np.float64)
    windows = _window_rms(x, int(0.5 * rate))
    short = _window_rms(x, int(0.02 * rate))
    loud = np.flatnonzero(short > 10 ** (SPEECH_DB / 20))
    step = int(0.02 * rate) / rate
    lead = float(loud[0] * step) if len(loud) else len(x) / rate
    tail = float((len(short) - 1 - loud[-1]) * step) if len(loud) else len(x) / rate
    return Figures(rms_db=_db(float(np.sqrt(np.mean(x ** 2)))) if len(x) else -120.0,
                   peak_db=_db(float(np.max(np.abs(x)))) if len(x) else -120.0,
                   noise_floor_db=_db(float(windows.min())) if len(windows) else -120.0,
                   lead_seconds=round(lead, 3), tail_seconds=round(tail, 3), sample_rate=rate,
                   kbps=round(info.bitrate / 1000),
                   constant_bitrate=info.bitrate_mode == BitrateMode.CBR)


def _window_rms(x: np.ndarray[Any, np.dtype[np.float64]], size: int) -> np.ndarray[Any, Any]:
    """RMS of consecutive windows of `size` samples (the last partial one left out)."""
    whole = len(x) // size
    if not whole:
        return np.zeros(0)
    return np.asarray(np.sqrt(np.mean(x[:whole * size].reshape(whole, size) ** 2, axis=1)))

