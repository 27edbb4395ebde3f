"""Listen while it is made: a job's book as HLS, from the fragments encoded so far.

Workers record each MP3 or AAC fragment they keep (models/fragments.py). The playlist lists
them from the book's start, in order, up to the first one still missing; each is served here
from the media store, behind the ID3 timestamp that HLS asks of packed audio (an MP3's own
LAME tag frame left out, so that the frames decode one fragment after another with nothing
between them). A completed
job's playlist ends with `#EXT-X-ENDLIST`. MP3 and m4b books have fragments (not ACX-mastered
ones, which are encoded whole); other formats have no stream.
"""

import io
import math
import struct
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request, Response
from mutagen import id3
from sqlalchemy import select

from api.errors import ApiError, not_found, unavailable
from api.owned import read_job
from api.state import OwnerDep, SessionDep, StateDep
from core import mp3
from core.views import streamable
from models import Fragment, Job, JobStatus

router = APIRouter()

PLAYLIST_TYPE = "application/vnd.apple.mpegurl"
SEGMENT_TYPES = {"mp3": ("mp3", "audio/mpeg"), "m4b": ("aac", "audio/aac")}
TIMESTAMP_OWNER = "com.apple.streaming.transportStreamTimestamp"
CLOCK = 90_000  # MPEG-2 ticks a second, as HLS timestamps count


async def _playable(session: SessionDep, job: Job) -> list[Fragment]:
    """The job's fragments from the book's start, in order, up to the first gap."""
    rows = (await session.scalars(select(Fragment).where(Fragment.job_id == job.id)
                                  .order_by(Fragment.first))).all()
    playable: list[Fragment] = []
    for row in rows:
        if row.first != (playable[-1].last + 1 if playable else 0):
            break
        playable.append(row)
    return playable


async def _streamable_job(state: StateDep, job_id: str, owner: str) -> Job:
    job = await read_job(state, job_id, owner)
    if not streamable(job):
        raise ApiError(409, f"a {job.response_format} job has no stream: MP3 and m4b books "
                       "(not ACX-mastered) are streamed while they are made",
                       type="conflict_error", code="stream_unavailable")
    return job


@router.get("/v1/audio/jobs/{job_id}/stream.m3u8", response_class=Response)
async def job_stream(job_id: str, state: StateDep, session: SessionDep, owner: OwnerDep,
                     request: Request,
                     chapter: Annotated[int | None, Query(ge=0)] = None) -> Response:
    """The job's book as an HLS playlist (`chapter`: one chapter's), listing what is made so
    far; it ends with `#EXT-X-ENDLIST` once the job completes. Players reload it as it grows."""
    job = await _streamable_job(state, job_id, owner)
    fragments = await _playable(session, job)
    ended = job.status in (JobStatus.completed, JobStatus.failed, JobStatus.cancelled)
    if job.status == JobStatus.completed and (
            not fragments or fragments[-1].last != job.segments_total - 1):
        raise ApiError(409, "this job's parts were not kept (KEEP_PARTS=false), so its "
                       "stream is gone: download the book", type="conflict_error",
                       code="stream_unavailable")
    if chapter is not None:
        fragments = [f for f in fragments if f.chapter == chapter]
    extension = SEGMENT_TYPES[job.response_format][0]
    longest = max((f.samples / f.rate for f in fragments), default=1.0)
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{math.ceil(longest)}",
             "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:EVENT"]
    for fragment in fragments:
        lines += [f"#EXTINF:{fragment.samples / fragment.rate:.3f},",
                  f"stream/{fragment.first}.{extension}"]
    if ended:
        lines.append("#EXT-X-ENDLIST")
    return Response("\n".join(lines) + "\n", media_type=PLAYLIST_TYPE,
                    headers={"Cache-Control": "no-cache"})


@router.get("/v1/audio/jobs/{job_id}/stream/{name}", response_class=Response)
async def job_stream_fragment(job_id: str, name: str, state: StateDep, session: SessionDep,
                              owner: OwnerDep) -> Response:
    """One fragment of the job's stream (`<first segment>.mp3` or `.aac`), with the ID3
    timestamp of where it starts in the book."""
    job = await _streamable_job(state, job_id, owner)
    extension, media_type = SEGMENT_TYPES[job.response_format]
    first, dot, asked = name.partition(".")
    if not first.isdigit() or len(first) > 9 or asked != extension or not dot:
        raise not_found(f"no fragment '{name}'", "name")
    fragments = await _playable(session, job)
    before = [f for f in fragments if f.first < int(first)]
    found = next((f for f in fragments if f.first == int(first)), None)
    if found is None:
        raise not_found(f"no fragment '{name}' yet", "name")
    try:
        data = await anyio.to_thread.run_sync(_read, state.store, found.key)
    except FileNotFoundError:
        raise not_found(f"fragment '{name}' is gone (the job's parts were deleted)",
                        "name") from None
    except OSError as exc:
        raise unavailable(f"storage is unreachable: {exc}") from exc
    if extension == "mp3":  # its LAME tag would play as a frame of silence at each join
        data = mp3.audio_frames(data)
    start = sum(f.samples for f in before) * CLOCK // found.rate
    return Response(_timestamp(start) + data, media_type=media_type,
                    headers={"Cache-Control": "max-age=86400"})


def _read(store: Any, key: str) -> bytes:
    with store.open(key) as handle:
        data: bytes = handle.read()
    return data


def _timestamp(ticks: int) -> bytes:
    """An ID3 tag with the PRIV frame that dates a packed audio segment (33 bits, 90 kHz)."""
    frames: Any = id3  # mutagen is untyped
    tag = frames.ID3()
    tag.add(frames.PRIV(owner=TIMESTAMP_OWNER, data=struct.pack(">Q", ticks % (1 << 33))))
    out = io.BytesIO()
    tag.save(out, padding=lambda info: 0)
    return out.getvalue()
