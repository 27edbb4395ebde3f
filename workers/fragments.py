"""MP3 books from fragments encoded in parallel and joined without re-encoding.

One LAME stream runs on one core, so a whole book encoded as one stream after its last
segment took minutes (an hour of audio: 28 s on 2 cores). Instead the book is cut at its
silences into fragments, each encoded on its own (on a CPU worker as soon as its segments are
done, workers/progressive.py, or on the assembly's threads), and their frames are joined into
one file by ffmpeg's MP3 muxer (PyAV), which writes one Xing/LAME header: the first fragment's
encoder delay and the last one's padding, so decoders trim exactly those.

The joins are sample-exact. A fragment of N input samples, N a whole number of MP3 frames,
decodes to N + `overhead` samples (the encoder's priming and flush frames). Every fragment
but the last starts on a frame boundary of the book (the timeline rounds the silence before
it), and its input stops `overhead` samples short of the next fragment: the priming and
flush of each join land inside the silence between two segments, where they belong.
"""

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.audio import Audio, encode
from models import Segment
from workers.timeline import frame_span, gap_samples

if TYPE_CHECKING:  # GPU workers import this module for nothing and carry no ffmpeg
    import av


def frame_samples(rate: int) -> int:
    """Return the samples in one MP3 frame at `rate` (MPEG-1 above 24 kHz, else MPEG-2/2.5)."""
    return 1152 if rate >= 32000 else 576


@lru_cache(maxsize=8)
def overhead(rate: int) -> int:
    """Return the samples a fragment decodes to beyond its input (a whole number of frames).

    Measured once per rate on the encoder itself rather than assumed: it is LAME's choice.
    """
    frame = frame_samples(rate)
    return frames_in(encode(np.zeros(frame, np.float32), rate, "mp3")) * frame - frame


def frames_for(samples: int, rate: int) -> int:
    """Return the MP3 frames a fragment of `samples` input samples encodes to."""
    frame = frame_samples(rate)
    return -(-samples // frame) + overhead(rate) // frame


def frames_in(data: bytes) -> int:
    """Return the audio frames an MP3 holds (a truncated file holds fewer)."""
    import av

    with av.open(io.BytesIO(data), mode="r") as source:
        stream = source.streams.audio[0]
        return sum(1 for packet in source.demux(stream) if packet.size)


def encode_fragment(audio: Audio, rate: int) -> bytes:
    """Encode one fragment as a standalone MP3."""
    return encode(audio, rate, "mp3")


@dataclass(frozen=True)
class Encoded:
    """A fragment's MP3 for the book and, if it closes a chapter, for the chapter file."""

    book: bytes
    closing: bytes | None = None


def encode_group(group: Sequence[Segment], following: Segment | None,
                 finished: Callable[[Segment], Audio], rate: int) -> Encoded:
    """Encode the segments between two cuts (and their silences) as one fragment.

    Depends on nothing outside the group but the segment after it (None: the book's last):
    so it can be encoded as soon as its own parts exist, before the rest of the book.
    """
    blocks: list[Audio] = []
    for n, segment in enumerate(group):
        blocks.append(finished(segment))
        if n < len(group) - 1:
            blocks.append(np.zeros(gap_samples(segment, rate), np.float32))
    speech = np.concatenate(blocks)
    if following is None:
        book = encode_fragment(speech, rate)
        return Encoded(book, book)
    short = overhead(rate)
    span = frame_span(len(speech), gap_samples(group[-1], rate), frame_samples(rate), short)
    book = encode_fragment(np.concatenate([speech, np.zeros(span - len(speech) - short,
                                                            np.float32)]), rate)
    closes = following.chapter != group[-1].chapter
    return Encoded(book, encode_fragment(speech, rate) if closes else None)


def group_key(prefix: str, group: Sequence[Segment], following: Segment | None,
              lufs: float, rate: int) -> str:
    """Return where a group's encoded fragment is kept: named for everything it depends on
    (a segment synthesised again has another attempt count and length, so another name)."""
    facts: list[tuple[object, ...]] = [(str(s.id), s.attempts, s.samples, s.pause_after,
                                         s.chapter) for s in group]
    facts.append((following.chapter if following else None, lufs, rate))
    digest = hashlib.sha256(repr(facts).encode()).hexdigest()[:16]
    return f"{prefix}/fragments/{group[0].index:06d}-{digest}.mp3"


class Joiner:
    """One MP3 file written from fragments' frames, in the order they are added."""

    def __init__(self, sink: Path) -> None:
        import av

        self._out: av.container.OutputContainer | None = av.open(str(sink), mode="w",
                                                                 format="mp3")
        self._target: av.audio.stream.AudioStream | None = None
        self._offset = 0

    def add(self, data: bytes) -> None:
        """Append one fragment's frames, its timestamps shifted to follow the last one's."""
        import av

        assert self._out is not None, "closed"
        with av.open(io.BytesIO(data), mode="r") as source:
            stream = source.streams.audio[0]
            if self._target is None:
                self._target = self._out.add_stream_from_template(stream)
            base, end, trim, held = None, self._offset, 0, None
            for packet in source.demux(stream):
                if packet.dts is None or packet.pts is None:  # the demuxer's flush packet
                    continue
                base = packet.pts if base is None else base
                packet.pts += self._offset - base
                packet.dts += self._offset - base
                end = max(end, packet.pts + (packet.duration or 0))
                packet.stream = self._target
                trim += _end_trim(packet)
                if held is not None:
                    self._out.mux(held)
                held = packet
            if held is not None:
                # The demuxer spreads a padding longer than one frame over the last packets;
                # the muxer reads only the last one's: give it all.
                _set_end_trim(held, trim)
                self._out.mux(held)
            self._offset = end

    def close(self) -> None:
        """Write the header with the whole file's frame count, delay and padding (once)."""
        if self._out is not None:
            self._out.close()
            self._out = None

    def __enter__(self) -> "Joiner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _end_trim(packet: "av.Packet[Any]") -> int:
    """Return the samples the demuxer says to drop from the end of this packet."""
    for side in packet.iter_sidedata():
        if side.data_type == "skip_samples":
            return int.from_bytes(bytes(side)[4:8], "little")
    return 0


def _set_end_trim(packet: "av.Packet[Any]", samples: int) -> None:
    for side in packet.iter_sidedata():
        if side.data_type == "skip_samples":
            data = bytearray(bytes(side))
            data[4:8] = samples.to_bytes(4, "little")
            side.update(bytes(data))
            packet.set_sidedata(side)
