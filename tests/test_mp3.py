"""core.mp3: LAME tags read and written, and MP3s joined as a copy of their audio frames."""

import io
import os

import numpy as np
import pytest

from core import mp3
from core.audio import decode, encode


def lame_files(rate: int, count: int = 4, seconds: float = 2.0) -> list[bytes]:
    rng = np.random.default_rng(rate)
    return [encode((0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32),
                   rate, "mp3") for _ in range(count)]


@pytest.mark.parametrize("rate", [22050, 24000, 44100])
def test_lame_tags_read_and_their_crcs_agree_with_ours(rate: int) -> None:
    for data in lame_files(rate):
        tag = mp3.read_tag(data)
        assert tag.size == len(data)
        assert tag.delay == 576  # LAME's priming at these rates
        assert mp3.crc16(data[len(tag.frame):]) == tag.music_crc  # LAME's music CRC
        # Rewritten with its own fields, the tag frame is what LAME wrote (the CRC included).
        assert tag.to_bytes(tag.frame[tag.at + 16:tag.at + 116]) == tag.frame


def test_crc_combine_equals_the_crc_of_the_whole() -> None:
    for length in (0, 1, 2, 3, 255, 4096, 123_457):
        a, b = os.urandom(97), os.urandom(length)
        assert mp3.crc16_combine(mp3.crc16(a), mp3.crc16(b), len(b)) == mp3.crc16(a + b)


@pytest.mark.parametrize("rate", [22050, 24000, 44100])
def test_joined_file_has_one_valid_tag_for_the_whole(rate: int) -> None:
    files = lame_files(rate)
    tags = [mp3.read_tag(f) for f in files]
    sink = io.BytesIO()
    joiner = mp3.Joiner(sink)
    for data in files:
        joiner.add(data)
    joiner.close()
    joined = sink.getvalue()
    tag = mp3.read_tag(joined)  # its CRC checks out, as FFmpeg requires to trust it
    assert tag.size == len(joined)
    assert tag.frames == sum(t.frames for t in tags)
    assert (tag.delay, tag.padding) == (tags[0].delay, tags[-1].padding)
    assert mp3.crc16(joined[len(tag.frame):]) == tag.music_crc
    toc = tag.frame[tag.at + 16:tag.at + 116]
    assert toc[0] == 0
    assert list(toc) == sorted(toc)
    assert toc[-1] > 240
    # The audio frames are the files' own, byte for byte: the decoded join is their decodes
    # one after the other, priming and padding trimmed only at the two ends.
    body = b"".join(f[len(t.frame):] for f, t in zip(files, tags, strict=True))
    assert joined[len(tag.frame):] == body
    frame = 1152 if rate >= 32000 else 576
    assert len(decode(joined)[0]) == tag.frames * frame - tag.delay - tag.padding


def test_damaged_or_short_files_are_refused() -> None:
    data = lame_files(24000, count=1)[0]
    tag = mp3.read_tag(data)
    damaged = bytearray(data)
    damaged[tag.at + 10] ^= 0xFF  # the frame count, under the tag's CRC
    with pytest.raises(ValueError, match="CRC"):
        mp3.read_tag(bytes(damaged))
    with pytest.raises(ValueError, match="not an MPEG layer III frame"):
        mp3.read_tag(b"ID3\x04" + data)
    joiner = mp3.Joiner(io.BytesIO())
    with pytest.raises(ValueError, match="bytes"):
        joiner.add(data[:len(data) // 2])  # still being written, or cut short


@pytest.mark.parametrize("rate", [22050, 24000])
def test_streamed_mp3_pieces_decode_as_one_stream_at_their_places(rate: int) -> None:
    """Pieces encoded block by block (core/mp3_stream.py), put one after another, decode as
    one stream: each piece's audio DELAY samples into its part, the parts' lengths adding
    up to the whole."""
    import av

    from core.mp3_stream import DELAY, Mp3Stream

    noise = np.random.default_rng(2)
    pieces = []
    for n in range(3):
        audio = (0.2 * noise.standard_normal(rate // 2 + 333 * n)).astype(np.float32)
        encoder = Mp3Stream(rate)
        data = b"".join(encoder.add(audio[at:at + 1000]) for at in range(0, len(audio), 1000))
        pieces.append((data + encoder.close(), encoder.samples, audio))
    with av.open(io.BytesIO(b"".join(p[0] for p in pieces)), mode="r", format="mp3") as container:
        decoded = np.concatenate([frame.to_ndarray().reshape(-1)
                                  for frame in container.decode(container.streams.audio[0])])
    assert len(decoded) == sum(samples for _, samples, _ in pieces)
    at = 0
    for _, samples, audio in pieces:
        heard = decoded[at + DELAY:at + DELAY + 2000]
        match = np.dot(heard, audio[:2000]) / (np.linalg.norm(heard) * np.linalg.norm(audio[:2000]))
        assert match > 0.85  # lossy, but the same sound in the same place
        assert samples >= DELAY + len(audio)
        at += samples
