"""MP3 made as the audio comes: one LAME stream per spoken piece, frames out as they fill.

Text streamed in over the WebSocket asks for MP3 to save bandwidth (about a sixth of 16-bit
PCM at 22.05 kHz). Each sentence is its own LAME stream (PyAV's libmp3lame, no container,
so no tag frame): its frames go out as soon as LAME has them, and streams put one after
another decode as one, because every LAME stream starts its bit reservoir empty
(core/mp3.py). A stream decodes to `frames * frame_size` samples, its audio starting
DELAY samples in (LAME's encoder delay and the decoder's, as FFmpeg reports them for
libmp3lame); the API places each sentence's times with them.
"""

from typing import Any

import av
import numpy as np

from core.audio import Audio

DELAY = 1105  # samples before a stream's first sound: 576 (LAME) + 529 (decoder)
BITRATE = 64_000  # mono speech; 8 kB/s


class Mp3Stream:
    """One LAME stream: `add` float32 blocks, then `close`; each returns the frames made."""

    def __init__(self, rate: int) -> None:
        self._codec = av.CodecContext.create("libmp3lame", "w")
        self._codec.sample_rate, self._codec.layout, self._codec.format = rate, "mono", "fltp"
        self._codec.bit_rate = BITRATE
        self._codec.open()
        self.rate, self.delay = rate, DELAY
        self.frames = 0  # MP3 frames made so far

    @property
    def samples(self) -> int:
        """How many samples the frames made so far decode to (DELAY and padding included)."""
        return self.frames * int(self._codec.frame_size)

    def add(self, audio: Audio) -> bytes:
        """Encode a block; return the whole frames it completed (often none)."""
        if not len(audio):
            return b""
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(audio, dtype=np.float32).reshape(1, -1), format="fltp",
            layout="mono")
        frame.sample_rate = self.rate
        return self._packets(self._codec.encode(frame))

    def close(self) -> bytes:
        """Flush the encoder; return its last frames."""
        return self._packets(self._codec.encode(None))

    def _packets(self, packets: list[Any]) -> bytes:
        self.frames += len(packets)
        return b"".join(bytes(packet) for packet in packets)
