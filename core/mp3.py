"""The Xing/LAME tag of an MP3, read and written, so that MP3s join as a copy of their bytes.

LAME starts every seekable file with one frame that holds no audio: the tag. It gives the
file's audio frame count and byte count, a seek table (TOC, for VBR), and the encoder delay and
padding that gapless decoders trim from the two ends. Every LAME stream also starts its bit
reservoir empty, so the audio frames of several such files, put one after the other, decode
as one stream. A joined file is therefore the first file's tag, rewritten for the whole, then
every file's audio frames as they are: no per-frame work (PyAV's muxer took about 10 µs of
Python per frame, under the GIL: 2 s for 43 minutes of 24 kHz speech, and 12 s each when
three books were joined at once).

Field layout: LAME's `VbrTag.c` and the "Mp3 Info Tag rev 1" specification. The tag's CRC-16
(poly 0xA001, as FFmpeg checks it before it trusts the tag's lengths) covers the frame up to
the CRC; the music CRC covers the audio frames, and is combined from each file's own (zlib's
crc32_combine method), never computed again byte by byte.
"""

import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO

# Layer III bitrates (kbit/s) by bitrate index, for MPEG-1 and for MPEG-2/2.5.
_KBPS = {True: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
         False: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_ALL_FIELDS = 0x0F  # frames, bytes, TOC and quality: LAME writes all four
_POLY = 0xA001  # CRC-16/ARC, reflected


def _table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_TABLE = _table()


def crc16(data: bytes, crc: int = 0) -> int:
    """CRC-16/ARC of `data`, continuing from `crc` (for short runs: this loops in Python)."""
    for byte in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ byte) & 0xFF]
    return crc


def _times(matrix: Sequence[int], vector: int) -> int:
    out, column = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[column]
        vector >>= 1
        column += 1
    return out


def _square(matrix: Sequence[int]) -> list[int]:
    return [_times(matrix, column) for column in matrix]


def _zero_bytes_operators(count: int) -> list[list[int]]:
    """The register's map over 1, 2, 4, ... zero bytes (GF(2) matrices, one int a column)."""
    operator = [_POLY] + [1 << n for n in range(15)]  # one zero bit
    for _ in range(3):
        operator = _square(operator)
    operators = [operator]
    for _ in range(count - 1):
        operators.append(_square(operators[-1]))
    return operators


_ZEROS = _zero_bytes_operators(48)


def crc16_combine(crc1: int, crc2: int, length2: int) -> int:
    """Return the CRC of A + B from crc1 = CRC(A), crc2 = CRC(B) and len(B), in O(log len(B))."""
    power = 0
    while length2:
        if length2 & 1:
            crc1 = _times(_ZEROS[power], crc1)
        length2 >>= 1
        power += 1
    return crc1 ^ crc2


@dataclass(frozen=True)
class Tag:
    """A LAME file's tag frame and what it says about the file."""

    frame: bytes  # the whole tag frame, as written
    at: int  # where "Xing"/"Info" starts in it
    frames: int  # audio frames after the tag frame
    size: int  # bytes of the whole file, the tag frame included
    delay: int  # encoder delay, in samples
    padding: int  # samples of padding at the end
    music_crc: int  # CRC-16 of the audio frames

    @property
    def lame(self) -> int:
        """Where the LAME extension starts in the frame."""
        return self.at + 120

    def to_bytes(self, toc: bytes) -> bytes:
        """The frame with this tag's fields and `toc` written into it, its CRC made anew."""
        frame = bytearray(self.frame)
        frame[self.at + 8:self.at + 16] = struct.pack(">II", self.frames, self.size)
        frame[self.at + 16:self.at + 116] = toc
        lame = self.lame
        frame[lame + 21:lame + 24] = ((self.delay << 12) | self.padding).to_bytes(3, "big")
        frame[lame + 28:lame + 34] = struct.pack(">IH", self.size, self.music_crc)
        frame[lame + 34:lame + 36] = struct.pack(">H", crc16(bytes(frame[:lame + 34])))
        return bytes(frame)


def _frame_length(header: int) -> tuple[int, int]:
    """Return (frame bytes, side-information bytes) of a layer III frame header."""
    if header >> 21 != 0x7FF or (header >> 17) & 3 != 1:
        raise ValueError("not an MPEG layer III frame")
    version, bitrate, rate = (header >> 19) & 3, (header >> 12) & 15, (header >> 10) & 3
    if version == 1 or bitrate in (0, 15) or rate == 3:
        raise ValueError("a frame header with reserved or free-format values")
    mpeg1, mono = version == 3, (header >> 6) & 3 == 3
    length = (144 if mpeg1 else 72) * _KBPS[mpeg1][bitrate] * 1000 // _RATES[version][rate]
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    return length + ((header >> 9) & 1), side


def read_tag(data: bytes) -> Tag:
    """Read the LAME tag that starts `data`; ValueError if there is none, or it is damaged."""
    if len(data) < 4:
        raise ValueError("too short for an MP3 frame")
    length, side = _frame_length(int.from_bytes(data[:4], "big"))
    at = 4 + side
    frame = bytes(data[:length])
    if len(frame) < at + 156 or frame[at:at + 4] not in (b"Xing", b"Info"):
        raise ValueError("the first frame holds no Xing/Info tag")
    flags, frames, size = struct.unpack(">III", frame[at + 4:at + 16])
    if flags & _ALL_FIELDS != _ALL_FIELDS:
        raise ValueError(f"the tag lacks fields LAME writes (flags {flags:#x})")
    lame = at + 120
    if crc16(frame[:lame + 34]) != int.from_bytes(frame[lame + 34:lame + 36], "big"):
        raise ValueError("the LAME tag's CRC does not match it")
    delay_padding = int.from_bytes(frame[lame + 21:lame + 24], "big")
    music_crc = int.from_bytes(frame[lame + 32:lame + 34], "big")
    return Tag(frame, at, frames, size, delay_padding >> 12, delay_padding & 0xFFF, music_crc)


def audio_frames(data: bytes) -> bytes:
    """Return a LAME file's audio frames without its tag frame: frames a player plays one
    file after another (an HLS stream) and never mistakes the tag for a silent frame."""
    return data[len(read_tag(data).frame):]


class Joiner:
    """One MP3 file written from LAME files, their audio frames copied in the order added.

    The tag is the first file's, rewritten on close with the whole file's frame count, size,
    seek table, music CRC, the first file's encoder delay and the last one's padding.
    """

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._tag: Tag | None = None
        self._pieces: list[tuple[int, int]] = []  # (audio frames, audio bytes) of each file
        self._crc = 0
        self._padding = 0

    def add(self, data: bytes) -> None:
        """Append one LAME file's audio frames (ValueError: not a whole LAME file)."""
        tag = read_tag(data)
        if tag.size != len(data):
            raise ValueError(f"the file holds {len(data)} bytes, its tag says {tag.size}")
        audio = memoryview(data)[len(tag.frame):]
        if self._tag is None:
            self._tag = tag
            self._sink.write(tag.frame)  # rewritten on close
        self._sink.write(audio)
        self._pieces.append((tag.frames, len(audio)))
        self._crc = crc16_combine(self._crc, tag.music_crc, len(audio))
        self._padding = tag.padding

    def close(self) -> None:
        """Write the tag for the whole file (at the start of the sink, which must seek)."""
        if self._tag is None:
            raise ValueError("nothing was joined")
        frames = sum(n for n, _ in self._pieces)
        size = len(self._tag.frame) + sum(b for _, b in self._pieces)
        tag = replace(self._tag, frames=frames, size=size, padding=self._padding,
                      music_crc=self._crc)
        self._sink.seek(0)
        self._sink.write(tag.to_bytes(self._toc(frames)))
        self._sink.seek(0, 2)

    def _toc(self, frames: int) -> bytes:
        """The seek table: for each percent of the duration, its byte position in 256ths of
        the audio, interpolated linearly inside each joined file (it is only a seek hint)."""
        audio = sum(b for _, b in self._pieces)
        toc, first_frame, offset = [], 0, 0
        pieces = iter(self._pieces)
        piece_frames, piece_bytes = next(pieces)
        for percent in range(100):
            target = percent * frames / 100
            while target >= first_frame + piece_frames and piece_frames:
                first_frame, offset = first_frame + piece_frames, offset + piece_bytes
                piece_frames, piece_bytes = next(pieces, (0, 0))
            inside = (target - first_frame) / piece_frames * piece_bytes if piece_frames else 0
            toc.append(min(255, int((offset + inside) * 256 / audio)))
        return bytes(toc)
