"""MP3 books from fragments encoded in parallel and joined without re-encoding.

One LAME stream runs on one core, so a whole book encoded as one stream after its last
segment took minutes (an hour of audio: 28 s on 2 cores). Instead the book is cut at its
silences into fragments, each encoded on its own (on a CPU worker as soon as its segments are
done, workers/progressive.py, or on the assembly's threads), and their audio frames are
copied into one file behind one Xing/LAME tag (core.mp3): the first fragment's encoder delay
and the last one's padding, so decoders trim exactly those.

The joins are sample-exact. A fragment of N input samples, N a whole number of MP3 frames,
decodes to N + `overhead` samples (the encoder's priming and flush frames). Every fragment
but the last starts on a frame boundary of the book (the timeline rounds the silence before
it), and its input stops `overhead` samples short of the next fragment: the priming and
flush of each join land inside the silence between two segments, where they belong.
"""

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

import numpy as np

from core import mp3
from core.audio import Audio, encode
from models import Segment
from workers.timeline import frame_span, gap_samples


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
    """Return the audio frames a whole LAME file holds, from its tag; 0 if it is not whole
    (cut short, still being written, or no LAME file at all)."""
    try:
        tag = mp3.read_tag(data)
    except ValueError:
        return 0
    return tag.frames if tag.size == len(data) else 0


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
    """One MP3 file written from fragments, in the order they are added (core.mp3.Joiner)."""

    def __init__(self, sink: Path) -> None:
        self._file: BinaryIO | None = open(sink, "wb")  # noqa: SIM115 (closed by close())
        self._joiner = mp3.Joiner(self._file)

    def add(self, data: bytes) -> None:
        """Append one fragment's audio frames."""
        assert self._file is not None, "closed"
        self._joiner.add(data)

    def close(self) -> None:
        """Write the tag for the whole file, then close it (once)."""
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
