"""Machine-readable marks that audio is synthetic, in every container that carries metadata.

Providers of systems that generate synthetic audio must mark it as artificially generated in
a machine-readable form (EU AI Act, Art. 50(2)). Narrator writes, with `MARK_OUTPUT` on (the
default), the same fields in each format's own metadata, read back by mutagen and by FFmpeg:

- MP3: ID3v2 `TXXX` frames (`AI_GENERATED`, `GENERATOR`, `MODEL`, `VOICE`, `JOB_ID`), a
  comment (`COMM`) with the statement, and `TSSE` (the software);
- m4b: MP4 freeform atoms (`----:org.narrator:AI_GENERATED` and the others) and `©too`;
- FLAC and Opus: Vorbis comments of the same names, `COMMENT` and `ENCODER`;
- WAV: a RIFF `LIST`/`INFO` chunk (`ISFT` the software, `ICMT` the statement and the
  fields), which players and FFmpeg read, and an `id3 ` chunk with the MP3's frames.

Raw PCM and ADTS AAC have nowhere to put them. Streamed WAV carries the `LIST` chunk in its
header; streamed PCM nothing.
"""

import io
import struct
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

STATEMENT = ("AI-generated: synthetic speech made by a text-to-speech model, not a recording "
             "of a person speaking.")
MARKED = ("mp3", "m4b", "flac", "opus", "wav")
MP4_PREFIX = "----:org.narrator:"


def software() -> str:
    try:
        return f"Narrator {version('narrator')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "Narrator"


@dataclass(frozen=True)
class Provenance:
    """Who made a piece of audio: the model and voice, and the job where there is one."""

    model: str
    voice: str
    job_id: str | None = None

    def fields(self) -> dict[str, str]:
        """Return the fields every marked format carries, by name."""
        out = {"AI_GENERATED": "true", "GENERATOR": software(), "MODEL": self.model,
               "VOICE": self.voice}
        return out | ({"JOB_ID": self.job_id} if self.job_id else {})

    def comment(self) -> str:
        """Return the statement with the fields, for formats that have one comment."""
        return STATEMENT + " " + "; ".join(f"{k.lower()}={v}" for k, v in self.fields().items()
                                           if k != "AI_GENERATED")


def riff_info(provenance: Provenance) -> bytes:
    """Return a RIFF `LIST`/`INFO` chunk: `ISFT` the software, `ICMT` the comment."""
    body = b"INFO"
    for key, text in ((b"ISFT", software()), (b"ICMT", provenance.comment())):
        data = text.encode("utf-8") + b"\0"
        body += key + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")
    return b"LIST" + struct.pack("<I", len(body)) + body


def mark_file(path: Path, fmt: str, provenance: Provenance) -> None:
    """Mark the file at `path` (of `fmt`) in place; formats without metadata are left."""
    if fmt == "wav":
        _wav_file(path, provenance)
    elif fmt in MARKED:
        _mutagen(path, fmt, provenance)


def mark_bytes(data: bytes, fmt: str, provenance: Provenance) -> bytes:
    """Return an encoded answer (of `fmt`) marked; formats without metadata come back as
    they are."""
    if fmt == "wav":
        return _riff_appended(data, provenance)
    if fmt not in MARKED:
        return data
    buffer = io.BytesIO(data)
    _mutagen(buffer, fmt, provenance)
    return buffer.getvalue()


def _riff_appended(data: bytes, provenance: Provenance) -> bytes:
    """Append the LIST chunk after a whole WAV's chunks and grow the RIFF size to match."""
    chunk = riff_info(provenance)
    if len(data) % 2:  # chunks start on even offsets
        chunk = b"\0" + chunk
    size = struct.unpack_from("<I", data, 4)[0] + len(chunk)
    return data[:4] + struct.pack("<I", size) + data[8:] + chunk


def _wav_file(path: Path, provenance: Provenance) -> None:
    from mutagen.wave import WAVE

    chunk = riff_info(provenance)
    with path.open("r+b") as f:  # appended: the samples are not rewritten
        f.seek(0, 2)
        if f.tell() % 2:
            chunk = b"\0" + chunk
        f.write(chunk)
        f.seek(4)
        size = struct.unpack("<I", f.read(4))[0] + len(chunk)
        f.seek(4)
        f.write(struct.pack("<I", size))
    audio: Any = WAVE(path)
    if audio.tags is None:
        audio.add_tags()
    add_id3(audio.tags, provenance)
    audio.save()


def add_id3(tags: Any, provenance: Provenance) -> None:
    """Add the marks to a mutagen ID3 tag (an MP3 book's tags add them with the rest)."""
    from mutagen import id3

    for key, value in provenance.fields().items():
        tags.add(id3.TXXX(encoding=3, desc=key, text=[value]))
    tags.add(id3.COMM(encoding=3, lang="eng", desc="AI-generated", text=[provenance.comment()]))
    tags.add(id3.TSSE(encoding=3, text=[software()]))


def _mutagen(target: Path | io.BytesIO, fmt: str, provenance: Provenance) -> None:
    from mutagen import id3
    from mutagen.flac import FLAC
    from mutagen.mp4 import MP4
    from mutagen.oggopus import OggOpus

    if fmt == "mp3":
        try:
            tags = id3.ID3(target)
        except id3.ID3NoHeaderError:
            tags = id3.ID3()
        add_id3(tags, provenance)
        _rewound(target)
        tags.save(target, v2_version=4)
        return
    if fmt == "m4b":
        mp4: Any = MP4(target)
        if mp4.tags is None:
            mp4.add_tags()
        add_mp4(mp4.tags, provenance)
        _rewound(target)
        mp4.save(target)
        return
    audio: Any = FLAC(target) if fmt == "flac" else OggOpus(target)
    if audio.tags is None:
        audio.add_tags()
    for key, value in provenance.fields().items():
        audio.tags[key] = value
    audio.tags["COMMENT"] = provenance.comment()
    audio.tags["ENCODER"] = software()
    _rewound(target)
    audio.save(target)


def add_mp4(tags: Any, provenance: Provenance) -> None:
    """Add the marks to a mutagen MP4 tag (an m4b book's tags add them with the rest)."""
    from mutagen.mp4 import MP4FreeForm

    for key, value in provenance.fields().items():
        tags[MP4_PREFIX + key] = [MP4FreeForm(value.encode())]
    tags["\xa9too"] = [software()]


def _rewound(target: Path | io.BytesIO) -> None:
    """Mutagen reads a file object from where it stands: saving starts from its start."""
    if isinstance(target, io.BytesIO):
        target.seek(0)
