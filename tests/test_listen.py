"""Listening while a book is made: a running MP3 job's HLS playlist lists the fragments done
so far and grows, each fragment carries its ID3 timestamp, and once the job completes the
playlist ends and plays the whole book through FFmpeg's HLS demuxer. Real API and worker
processes (Postgres, Redis, Piper), media in a folder and on S3."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import m3u8
import pytest
from sqlalchemy import Engine, select

from models import Fragment, Job
from models.base import utcnow, uuid7
from models.db import sql_engine_for
from models.fragments import record, replace
from tests.support import Stack, wait_job

SENTENCE = "The harbour lights came on one by one, and the boats turned home before the rain. "
BOOK = {"chapters": [{"title": "One", "input": SENTENCE * 30},
                     {"title": "Two", "input": SENTENCE * 20}],
        "response_format": "mp3"}


def _playlist(http: httpx.Client, url: str) -> m3u8.M3U8:
    response = http.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.apple.mpegurl"
    return m3u8.loads(response.text, uri=url)


def _decoded_seconds(source: Any, **options: Any) -> float:
    """Decode every audio frame of a file or URL with FFmpeg (PyAV); return its seconds."""
    samples, rate = 0, 0
    with av.open(source, **options) as container:
        for frame in container.decode(audio=0):
            samples, rate = samples + frame.samples, frame.sample_rate
    return samples / rate


def _listen(stack: Stack, fmt: str = "mp3") -> None:
    with stack.client() as http:
        job = http.post("/v1/audio/jobs", json=BOOK | {"response_format": fmt}).json()
        url = job["stream_url"] or ""
        assert url.endswith(f"/v1/audio/jobs/{job['id']}/stream.m3u8")
        # While it runs: the playlist lists what is done, and does not end.
        deadline, live = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            playlist = _playlist(http, url)
            status = http.get(f"/v1/audio/jobs/{job['id']}").json()["status"]
            if playlist.segments and status == "in_progress":
                live = playlist
                break
            assert status in ("queued", "in_progress"), status
            time.sleep(0.1)
        assert live is not None, "no fragment was listed while the job ran"
        assert not live.is_endlist
        assert live.playlist_type == "event"
        first = http.get(live.segments[0].absolute_uri)
        assert first.status_code == 200
        assert first.headers["content-type"] == {"mp3": "audio/mpeg", "m4b": "audio/aac"}[fmt]
        assert first.content.startswith(b"ID3")
        assert b"transportStreamTimestamp" in first.content
        # Once done: the whole book, ended, and playable end to end.
        done = wait_job(http, job["id"], timeout=300)
        assert done["status"] == "completed", done
        whole = _playlist(http, url)
        assert whole.is_endlist
        assert [s.uri for s in whole.segments[:len(live.segments)]] == \
            [s.uri for s in live.segments]  # it grew: what was listed stays, in order
        book = done["result"]["duration_seconds"]
        listed = sum(s.duration or 0.0 for s in whole.segments)
        assert abs(listed - book) < 0.2, (listed, book)
        chapters = [_playlist(http, f"{url}?chapter={n}") for n in (0, 1)]
        assert [s.uri for c in chapters for s in c.segments] == [s.uri for s in whole.segments]
        assert chapters[0].segments
        assert chapters[1].segments
        heard = _decoded_seconds(url, options={"protocol_whitelist": "http,tcp,file,crypto"})
        assert abs(heard - listed) < 0.01, (heard, listed)  # every frame, nothing between


def test_a_running_books_stream_grows_and_ends_with_the_book(local_stack: Stack) -> None:
    _listen(local_stack)


def test_the_stream_of_a_book_on_s3(s3_stack: Stack) -> None:
    _listen(s3_stack)


def test_an_m4b_books_stream_is_aac(local_stack: Stack) -> None:
    _listen(local_stack, "m4b")


def test_a_cancelled_books_stream_ends_with_what_was_made(local_stack: Stack) -> None:
    with local_stack.client() as http:
        job = http.post("/v1/audio/jobs", json=BOOK).json()
        deadline = time.monotonic() + 120
        while not _playlist(http, job["stream_url"]).segments:
            assert time.monotonic() < deadline, "no fragment listed"
            time.sleep(0.1)
        http.post(f"/v1/audio/jobs/{job['id']}/cancel")
        ended = _playlist(http, job["stream_url"])
        assert ended.is_endlist
        assert ended.segments


def test_jobs_without_fragments_have_no_stream(local_stack: Stack) -> None:
    with local_stack.client() as http:
        for body in ({"input": "A wave file.", "response_format": "wav"},
                     {"input": "Mastered.", "response_format": "mp3", "mastering": "acx"}):
            job = http.post("/v1/audio/jobs", json=body).json()
            assert job["stream_url"] is None
            answer = http.get(f"/v1/audio/jobs/{job['id']}/stream.m3u8")
            assert answer.status_code == 409
            assert answer.json()["error"]["code"] == "stream_unavailable"
        job = wait_job(http, http.post("/v1/audio/jobs", json={"input": "Short."}).json()["id"])
        for name in ("x.mp3", "0.aac", "99.mp3", "0"):  # malformed, wrong kind, not made
            assert http.get(f"/v1/audio/jobs/{job['id']}/stream/{name}").status_code == 404
        assert http.get(f"/v1/audio/jobs/job_{uuid.uuid4().hex}/stream.m3u8").status_code == 404


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    from migrations import upgrade

    url = f"sqlite:///{tmp_path}/narrator.db" if request.param == "sqlite" \
        else request.getfixturevalue("database_url")
    if request.param == "sqlite":
        upgrade(url)
    engine = sql_engine_for(url)
    yield engine
    engine.dispose()


def test_a_fragment_recorded_again_replaces_the_first(database: Engine) -> None:
    """Upserts on both databases: a segment synthesised again makes a new fragment under
    another key; the assembly's record then replaces the job's whole set."""
    from sqlalchemy.orm import Session

    job_id, now = uuid7(), utcnow()
    with Session(database) as session:
        session.add(Job(id=job_id, owner="t", status="in_progress", model="piper", voice="joe",
                        response_format="mp3", speed=1.0, options={}, chapters=[], meta={},
                        input_characters=5, segments_total=3, segments_done=0,
                        segments_failed=0, audio_seconds=0.0, created_at=now, updated_at=now))
        session.commit()
        record(session, job_id, 0, 0, 0, "a", 100, 22050)
        record(session, job_id, 1, 2, 0, "b", 200, 22050)
        record(session, job_id, 0, 0, 0, "a2", 110, 22050)
        session.commit()
        rows = session.execute(select(Fragment.first, Fragment.key, Fragment.samples)
                               .where(Fragment.job_id == job_id).order_by(Fragment.first)).all()
        assert [tuple(r) for r in rows] == [(0, "a2", 110), (1, "b", 200)]
        replace(session, job_id, [{"first": 0, "last": 2, "chapter": 0, "key": "c",
                                   "samples": 300, "rate": 22050}])
        session.commit()
        assert session.scalars(select(Fragment.key).where(Fragment.job_id == job_id)).all() \
            == ["c"]
