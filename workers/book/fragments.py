"""MP3 books from fragments encoded in parallel and joined without re-encoding.

One LAME stream runs on one core, so a whole book encoded as one stream after its last
segment took minutes (an hour of audio: 28 s on 2 cores). Instead the book is cut at its
silences into fragments, each encoded on its own (on a CPU worker as soon as its segments are
done, workers/book/progressive.py, or on the assembly's threads), and their audio frames are
copied into one file behind one Xing/LAME tag (core.mp3): the first fragment's encoder delay
and the last one's padding, so decoders trim exactly those.

The joins are sample-exact. A fragment of N input samples, N a whole number of MP3 frames,
decodes to N + `overhead` samples (the encoder's priming and flush frames). Every fragment
but the last starts on a frame boundary of the book (the timeline rounds the silence before
it), and its input stops `overhead` samples short of the next fragment: the priming and
flush of each join land inside the silence between two segments, where they belong.

m4b books are made the same way from AAC fragments (FFmpeg's AAC encoder through PyAV, each
an ADTS stream: 1,024-sample frames, a 1,024-sample priming frame and no other overhead on a
whole number of frames). Their packets are copied into one MPEG-4 audiobook file by PyAV's
muxer, no re-encoding: the first fragment's priming is skipped by the file's edit list, and
the last packet is shortened to the book's end.
"""

import hashlib
import io
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from core import mp3
from core.audio import Audio, Mark, chapter_entries, encode
from core.keys import fragment_key
from models import Segment
from workers.book.timeline import frame_span, gap_samples

FORMATS = ("mp3", "m4b")  # the formats whose books are joined from fragments
AAC_FRAME = 1024


def frame_samples(rate: int, fmt: str = "mp3") -> int:
    """Return the samples in one frame: AAC's 1,024; MP3's 1,152 above 24 kHz (MPEG-1),
    else 576 (MPEG-2/2.5)."""
    if fmt == "m4b":
        return AAC_FRAME
    return 1152 if rate >= 32000 else 576


@lru_cache(maxsize=16)
def overhead(rate: int, fmt: str = "mp3") -> int:
    """Return the samples a fragment decodes to beyond its input (a whole number of frames).

    Measured once per rate on the encoder itself rather than assumed: it is the encoder's
    choice.
    """
    frame = frame_samples(rate, fmt)
    return frames_in(encode_fragment(np.zeros(frame, np.float32), rate, fmt), fmt) * frame \
        - frame


def frames_for(samples: int, rate: int, fmt: str = "mp3") -> int:
    """Return the frames a fragment of `samples` input samples encodes to."""
    frame = frame_samples(rate, fmt)
    return -(-samples // frame) + overhead(rate, fmt) // frame


def frames_in(data: bytes, fmt: str = "mp3") -> int:
    """Return the audio frames a whole fragment holds; 0 if it is not whole (cut short,
    still being written, or not such a file at all)."""
    if fmt == "m4b":
        return _adts_frames(data)
    try:
        tag = mp3.read_tag(data)
    except ValueError:
        return 0
    return tag.frames if tag.size == len(data) else 0


def decoded_samples(data: bytes, rate: int, fmt: str = "mp3") -> int:
    """Return the samples a whole fragment decodes to, every frame counted (a player that
    trims an MP3's encoder delay and padding plays fewer, all of them silence)."""
    return frames_in(data, fmt) * frame_samples(rate, fmt)


def _adts_frames(data: bytes) -> int:
    """Count the ADTS frames of an AAC stream that ends exactly after its last frame."""
    at, frames = 0, 0
    while at + 7 <= len(data):
        if data[at] != 0xFF or data[at + 1] & 0xF0 != 0xF0:
            return 0
        length = (data[at + 3] & 0x03) << 11 | data[at + 4] << 3 | data[at + 5] >> 5
        if length < 7:
            return 0
        at, frames = at + length, frames + 1
    return frames if at == len(data) else 0


def encode_fragment(audio: Audio, rate: int, fmt: str = "mp3") -> bytes:
    """Encode one fragment as a standalone MP3, or as ADTS AAC for m4b."""
    return encode(audio, rate, "aac" if fmt == "m4b" else "mp3")


@dataclass(frozen=True)
class Encoded:
    """A fragment for the book and, if it closes a chapter, for the chapter file."""

    book: bytes
    closing: bytes | None = None


def encode_group(group: Sequence[Segment], following: Segment | None,
                 finished: Callable[[Segment], Audio], rate: int, fmt: str = "mp3") -> Encoded:
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
        book = encode_fragment(speech, rate, fmt)
        return Encoded(book, book)
    short = overhead(rate, fmt)
    span = frame_span(len(speech), gap_samples(group[-1], rate), frame_samples(rate, fmt), short)
    book = encode_fragment(np.concatenate([speech, np.zeros(span - len(speech) - short,
                                                            np.float32)]), rate, fmt)
    closes = following.chapter != group[-1].chapter
    return Encoded(book, encode_fragment(speech, rate, fmt) if closes else None)


def group_key(job_id: uuid.UUID, group: Sequence[Segment], following: Segment | None,
              lufs: float, rate: int, fmt: str = "mp3") -> str:
    """Return where a group's encoded fragment is kept: named for everything it depends on
    (a segment synthesised again has another attempt count and length, so another name)."""
    facts: list[tuple[object, ...]] = [(str(s.id), s.attempts, s.samples, s.pause_after,
                                         s.chapter) for s in group]
    facts.append((following.chapter if following else None, lufs, rate))
    digest = hashlib.sha256(repr(facts).encode()).hexdigest()[:16]
    return fragment_key(job_id, group[0].index, digest, fmt)


def closing_key(key: str) -> str:
    """Return where the chapter file's version of the fragment kept at `key` is kept."""
    stem, dot, ext = key.rpartition(".")
    return f"{stem}-closing{dot}{ext}"


class Joiner:
    """One book or chapter file written from fragments, in the order they are added: MP3
    frames behind one LAME tag (core.mp3.Joiner), or AAC packets in an m4b (_AacJoiner)."""

    def __init__(self, sink: Path, fmt: str = "mp3", marks: list[Mark] | None = None) -> None:
        self._file: BinaryIO | None = open(sink, "wb")  # noqa: SIM115 (closed by close())
        self._joiner: Any = _AacJoiner(self._file, marks) if fmt == "m4b" \
            else mp3.Joiner(self._file)

    def add(self, data: bytes, samples: int) -> None:
        """Append one fragment, which stands for `samples` samples of the file (its span;
        for the file's last, its input)."""
        assert self._file is not None, "closed"
        if isinstance(self._joiner, _AacJoiner):
            self._joiner.add(data, samples)
        else:  # an MP3's tag takes its delay and padding from the fragments themselves
            self._joiner.add(data)

    def close(self) -> None:
        """Finish the file (the MP3 tag, the m4b's index and chapters), then close it (once)."""
        if self._file is not None:
            try:
                self._joiner.close()
            finally:
                self._file.close()
                self._file = None

    def __enter__(self) -> "Joiner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AacJoiner:
    """AAC packets of ADTS fragments muxed into an MPEG-4 audiobook (PyAV), not re-encoded.

    Every fragment decodes to its frames: a priming frame, then its input. The first
    packet's timestamp is minus the priming, which the muxer writes as the edit list's
    skip; every packet then follows the one before, and the last is shortened so the file
    ends where its fragments' samples say.
    """

    def __init__(self, sink: BinaryIO, marks: list[Mark] | None) -> None:
        import av  # GPU workers need no ffmpeg

        self._av = av
        self._out = av.open(sink, mode="w", format="ipod")
        self._marks = marks
        self._stream: Any = None
        self._held: Any = None  # the newest packet: the last one is shortened at close
        self._pts = -AAC_FRAME
        self._samples = 0

    def add(self, data: bytes, samples: int) -> None:
        with self._av.open(io.BytesIO(data), mode="r", format="aac") as fragment:
            source = fragment.streams.audio[0]
            if self._stream is None:
                self._stream = self._out.add_stream_from_template(source)
                self._base = Fraction(1, source.sample_rate)
            for packet in fragment.demux(source):
                if not packet.size:
                    continue
                if self._held is not None:
                    self._out.mux(self._held)
                packet.stream, packet.time_base = self._stream, self._base
                packet.pts = packet.dts = self._pts
                packet.duration = AAC_FRAME
                self._pts += AAC_FRAME
                self._held = packet
        self._samples += samples

    def close(self) -> None:
        try:
            if self._held is not None:
                beyond = self._pts - self._samples  # decoded samples past the file's end
                self._held.duration = max(1, AAC_FRAME - beyond)
                self._out.mux(self._held)
            if self._marks:
                self._out.set_chapters(chapter_entries(self._marks))
        finally:
            self._out.close()
