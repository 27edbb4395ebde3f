"""Tags of a finished audiobook file: m4b (MP4 atoms) and MP3 (ID3v2.4), written with mutagen.

The book's title, author, narrator (the voice where none is given), year and description, the
genre "Audiobook" and the cover image go in every file of the job; a chapter file's title is
its chapter's, numbered as a track of the book. An MP3 book also gets ID3 chapter frames
(CHAP and a CTOC listing them), so players that read them show the chapters an m4b has as
chapter marks. Other formats are left as encoded (WAV, FLAC, Opus, AAC, PCM).
"""

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.audio import Mark
from core.marking import Provenance, add_id3, add_mp4

TAGGED = ("mp3", "m4b")


@dataclass(frozen=True)
class Tags:
    """What a file says of itself."""

    title: str | None = None
    album: str | None = None  # the book's title, on chapter files
    author: str | None = None
    narrator: str | None = None
    year: int | None = None
    description: str | None = None
    cover: bytes | None = None
    cover_png: bool = False
    track: tuple[int, int] | None = None  # (number, of)

    def for_chapter(self, title: str | None, number: int, of: int) -> "Tags":
        """Return the tags of one chapter's file."""
        return replace(self, title=title or f"Chapter {number}", album=self.title,
                       track=(number, of))


def book_tags(options: dict[str, Any], voice: str, cover: bytes | None,
              first_heading: str | None = None) -> Tags:
    """Return a job's tags: its `book`, its cover, and, when `book` gives no title, its first
    chapter heading as the title, so that every book file is named and carries its chapters
    (an MP3's ID3 chapter frames go with its tags)."""
    book = options.get("book") or {}
    title = book.get("title") or first_heading
    return Tags(title=title, album=title, author=book.get("author"),
                narrator=book.get("narrator") or voice, year=book.get("year"),
                description=book.get("description"), cover=cover,
                cover_png=str(options.get("cover", "")).endswith(".png"))


def write(path: Path, fmt: str, tags: Tags, marks: list[Mark] | None = None,
          made: Provenance | None = None) -> None:
    """Write `tags` (and, for an MP3 book, `marks` as ID3 chapters; given `made`, the marks
    that it is synthetic: core/marking.py) into the file at `path`."""
    if fmt == "m4b":
        _mp4(path, tags, made)
    elif fmt == "mp3":
        _id3(path, tags, marks or [], made)


def _mp4(path: Path, tags: Tags, made: Provenance | None) -> None:
    from mutagen.mp4 import MP4, MP4Cover

    audio = MP4(path)
    if audio.tags is None:
        audio.add_tags()
    assert audio.tags is not None
    text = {"\xa9nam": tags.title, "\xa9alb": tags.album, "\xa9ART": tags.author,
            "aART": tags.author, "\xa9wrt": tags.narrator, "\xa9day": tags.year and str(tags.year),
            "desc": tags.description, "\xa9cmt": tags.description}
    for atom, value in text.items():
        if value:
            audio.tags[atom] = [value]
    audio.tags["\xa9gen"] = ["Audiobook"]
    audio.tags["stik"] = [2]  # media kind: audiobook
    if tags.track:
        audio.tags["trkn"] = [tags.track]
    if tags.cover:
        kind = MP4Cover.FORMAT_PNG if tags.cover_png else MP4Cover.FORMAT_JPEG
        audio.tags["covr"] = [MP4Cover(tags.cover, imageformat=kind)]
    if made:
        add_mp4(audio.tags, made)
    audio.save()


def _chapters_in_order() -> Any:
    """mutagen's ID3, with its frames written chapter by chapter in the order they were added.

    mutagen writes frames of one kind shortest first (and keeps only pictures in their
    order), so a book's CHAP frames came out of time order whenever titles differ in length,
    and FFmpeg lists chapters in the order of the frames, not by their start (a book of
    "Chapter 1", "The Harbour", "The Storm" read back as 1, 3, 2). Players that follow the
    CTOC frame were right either way.
    """
    from mutagen import id3
    from mutagen.id3._tags import save_frame  # the frame writer mutagen's own _write uses

    class Ordered(id3.ID3):
        def _write(self, config: Any) -> bytearray:
            frames = list(self.values())
            data = [save_frame(frame, config=config) for frame in frames]
            chapter = [frame.FrameID in ("CTOC", "CHAP") for frame in frames]
            order = sorted(range(len(frames)), key=lambda n: (chapter[n], n))  # chapters last
            return bytearray().join(data[n] for n in order)

    return Ordered()


def _id3(path: Path, tags: Tags, marks: list[Mark], made: Provenance | None) -> None:
    from mutagen import id3

    frames = _chapters_in_order()
    text = {id3.TIT2: tags.title, id3.TALB: tags.album, id3.TPE1: tags.author,
            id3.TCOM: tags.narrator, id3.TDRC: tags.year and str(tags.year)}
    for frame, value in text.items():
        if value:
            frames.add(frame(encoding=id3.Encoding.UTF8, text=[value]))
    frames.add(id3.TCON(encoding=id3.Encoding.UTF8, text=["Audiobook"]))
    if tags.description:
        frames.add(id3.COMM(encoding=id3.Encoding.UTF8, lang="eng", desc="",
                            text=[tags.description]))
    if tags.track:
        frames.add(id3.TRCK(encoding=id3.Encoding.UTF8, text=[f"{tags.track[0]}/{tags.track[1]}"]))
    if tags.cover:
        frames.add(id3.APIC(encoding=id3.Encoding.UTF8,
                            mime="image/png" if tags.cover_png else "image/jpeg",
                            type=id3.PictureType.COVER_FRONT, desc="Cover", data=tags.cover))
    if marks:
        ids = [f"chp{n}" for n in range(len(marks))]
        frames.add(id3.CTOC(element_id="toc", flags=id3.CTOCFlags.TOP_LEVEL
                            | id3.CTOCFlags.ORDERED, child_element_ids=ids, sub_frames=[]))
        for element, (title, start, end) in zip(ids, marks, strict=True):
            frames.add(id3.CHAP(element_id=element, start_time=round(start * 1000),
                                end_time=round(end * 1000), sub_frames=[
                                    id3.TIT2(encoding=id3.Encoding.UTF8, text=[title])]))
    if made:
        add_id3(frames, made)
    frames.save(path, v2_version=4)
