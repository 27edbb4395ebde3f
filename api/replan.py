"""A re-render that changes chapters' text: plan them again and renumber the book around them.

The new text's segments take the chapter's place; the segments after it move up or down by
the difference, and so do their kept parts (a rename on a disk, a server-side copy on S3).
The parts move before the rows are renumbered, in the re-render's transaction; if it then
fails, a part found at the wrong place fails the assembly's sample check and that segment is
synthesised again (workers.book.parts.PartLost): nothing is lost but time.
"""

import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from core.keys import part_key, parts_prefix
from core.settings import CoreSettings
from core.text import Gaps, Piece, plan_pieces
from models import Segment, SegmentStatus, utcnow, uuid7
from models import segments as segment_state
from storage import MediaStore


class Part(NamedTuple):
    """A segment as a re-render sees it."""

    id: uuid.UUID
    number: int
    chapter: int
    overrides: dict[str, Any] | None


@dataclass
class Replan:
    """The book's new numbering: segments removed, kept ones moved, new ones added."""

    removed: list[Part] = field(default_factory=list)
    moves: dict[int, int] = field(default_factory=dict)  # old index -> new index
    moved: list[tuple[uuid.UUID, int]] = field(default_factory=list)  # id, new index
    new: list[tuple[int, Piece]] = field(default_factory=list)  # new index, piece

    def move_parts(self, store: MediaStore, job_id: uuid.UUID) -> None:
        """Move the kept parts to their new indexes (through a side folder: no clobbering),
        and delete the removed segments' parts."""
        side = f"{parts_prefix(job_id)}/moving"
        for old in self.moves:
            store.move(part_key(job_id, old), f"{side}/{old:06d}.wav")
        for part in self.removed:  # every moved part is aside now: no slot is shared
            store.delete(part_key(job_id, part.number))
        for old, new in self.moves.items():
            store.move(f"{side}/{old:06d}.wav", part_key(job_id, new))
        store.delete(side)

    async def renumber(self, session: AsyncSession, job_id: uuid.UUID) -> None:
        """Delete the removed rows and renumber the moved ones (through negative indexes, as
        the (job, index) pairs are unique at every row)."""
        if self.removed:
            await session.execute(segment_state.removed(p.id for p in self.removed))
        for segment_id, new in self.moved:
            await session.execute(segment_state.moved_aside(segment_id, new))
        if self.moved:
            await session.execute(segment_state.moved_back(job_id))

    async def insert(self, session: AsyncSession, job_id: uuid.UUID,
                     overrides: dict[str, Any] | None) -> list[uuid.UUID]:
        """Insert the new text's segments, pending and dispatched (the API sends them at
        once); return their ids."""
        ids, now = [uuid7() for _ in self.new], utcnow()
        rows = [{"id": key, "job_id": job_id, "index": n, "chapter": piece.chapter,
                 "text": piece.text, "pause_after": piece.pause_after, "speaker": piece.speaker,
                 "status": SegmentStatus.pending, "attempts": 0, "overrides": overrides,
                 "dispatched_at": now}
                for key, (n, piece) in zip(ids, self.new, strict=True)]
        if rows:
            await session.execute(insert(Segment), rows)
        return ids


def replan(rows: list[Part], texts: dict[int, str], settings: CoreSettings,
           language: str | None) -> Replan:
    """Return the book's new numbering with `texts` (chapter index: new text) planned."""
    gaps = Gaps(settings.sentence_gap_seconds, settings.paragraph_gap_seconds,
                settings.chapter_gap_seconds)
    out, at = Replan(), 0
    for chapter in range(1 + max((r.chapter for r in rows), default=-1)):
        if chapter in texts:
            out.removed += [r for r in rows if r.chapter == chapter]
            for piece in plan_pieces([texts[chapter]], settings.segment_chars, gaps,
                                     (language or "en")[:2]):
                out.new.append((at, Piece(chapter, piece.text, piece.pause_after,
                                          piece.speaker)))
                at += 1
            continue
        for r in (r for r in rows if r.chapter == chapter):
            if r.number != at:
                out.moves[r.number] = at
                out.moved.append((r.id, at))
            at += 1
    return out
