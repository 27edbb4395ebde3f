"""Finished audiobook files: tags, cover and chapters in m4b and MP3, read back with PyAV."""

import base64
import io
import json
from typing import Any

import av
import numpy as np
import pytest
from PIL import Image
from sqlalchemy import Engine

from tests.conftest import count_jobs, error_of
from tests.support import Stack, wait_job

BOOK = {"title": "The Harbour Book", "author": "A. Writer", "narrator": "Joe",
        "year": 2026, "description": "Two short chapters by the sea."}
CHAPTERS = [{"title": "Dawn", "input": "The boats came in at dawn."},
            {"title": "Noon", "input": "Fish were sold by noon."}]


def image(kind: str, size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 120, 40)).save(out, format=kind)
    return out.getvalue()


def read_back(data: bytes) -> dict[str, Any]:
    """What PyAV (ffmpeg) reads of a file: tags, chapter titles, and the attached picture."""
    with av.open(io.BytesIO(data), mode="r") as container:
        pictures = [s for s in container.streams.video if s.disposition.attached_pic]
        cover = bytes(next(container.demux(pictures[0]))) if pictures else None
        return {"tags": {k.lower(): v for k, v in container.metadata.items()},
                "chapters": [c["metadata"].get("title") for c in container.chapters()],
                "cover": cover}


def test_an_m4b_carries_the_books_tags_cover_and_chapter_titles(local_stack: Stack) -> None:
    cover = image("PNG")
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", files={"cover": ("cover.png", cover, "image/png")},
                            data={"request": json.dumps({"response_format": "m4b",
                                                         "chapters": CHAPTERS, "book": BOOK})})
        assert created.status_code == 202, created.text
        assert created.json()["book"] == BOOK
        job = wait_job(http, created.json()["id"])
        assert job["status"] == "completed", job
        book = read_back(http.get(job["result"]["url"]).content)
        chapter = read_back(http.get(job["result"]["chapters"][1]["url"]).content)
    assert {"title": "The Harbour Book", "artist": "A. Writer", "album_artist": "A. Writer",
            "composer": "Joe", "date": "2026", "genre": "Audiobook",
            "description": "Two short chapters by the sea."}.items() <= book["tags"].items()
    assert book["chapters"] == ["Dawn", "Noon"]
    assert book["cover"] == cover
    assert {"title": "Noon", "album": "The Harbour Book", "track": "2/2"}.items() \
        <= chapter["tags"].items()
    assert chapter["cover"] == cover


def test_an_mp3_book_carries_id3_tags_cover_and_chapters(local_stack: Stack) -> None:
    cover = image("JPEG")
    body = {"response_format": "mp3", "chapters": CHAPTERS,
            "book": {"title": "The Harbour Book", "author": "A. Writer"},
            "cover": base64.b64encode(cover).decode()}
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json=body).json()["id"])
        assert job["status"] == "completed", job
        data = http.get(job["result"]["url"]).content
    book = read_back(data)
    assert {"title": "The Harbour Book", "artist": "A. Writer", "composer": "joe",
            "genre": "Audiobook"}.items() <= book["tags"].items()
    assert book["chapters"] == ["Dawn", "Noon"]
    assert book["cover"] == cover
    with av.open(io.BytesIO(data), mode="r") as container:  # the tags leave the audio whole
        seconds = float(container.duration or 0) / av.time_base
    assert abs(seconds - job["result"]["duration_seconds"]) < 0.1


def test_a_markdown_mp3_book_without_a_title_is_named_and_chaptered(local_stack: Stack) -> None:
    """No `book`, no cover: the first heading names the file, and its chapters are marked."""
    text = "A preface.\n\n# The Harbour\n\nBoats came in.\n\n# The Storm\n\nRain fell.\n"
    body = {"response_format": "mp3", "input": text, "input_format": "markdown"}
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json=body).json()["id"])
        assert job["status"] == "completed", job
        data = http.get(job["result"]["url"]).content
    book = read_back(data)
    assert {"title": "The Harbour", "album": "The Harbour", "genre": "Audiobook"}.items() \
        <= book["tags"].items()
    assert book["chapters"] == ["Chapter 1", "The Harbour", "The Storm"]


BAD_COVERS = [
    ("not base64", {"cover": "%%%"}, 400, "cover"),
    ("not an image", {"cover": base64.b64encode(b"hello").decode()}, 400, "cover"),
    ("a GIF", {"cover": base64.b64encode(image("GIF")).decode()}, 400, "cover"),
    ("cut short", {"cover": base64.b64encode(image("PNG", (300, 300))[:400]).decode()}, 400,
     "cover"),
    ("too many pixels", {"cover": base64.b64encode(image("PNG", (5001, 10))).decode()}, 400,
     "cover"),
    ("too large", {"cover": base64.b64encode(b"\xff" * (5 * 1024 * 1024 + 1)).decode()}, 413,
     "cover"),
    ("a year out of range", {"book": {"year": 0}}, 400, "book.year"),
    ("an unknown book field", {"book": {"isbn": "x"}}, 400, "book.isbn"),
    ("an empty title", {"book": {"title": ""}}, 400, "book.title"),
]


@pytest.mark.parametrize(("name", "change", "status", "param"), BAD_COVERS,
                         ids=[b[0] for b in BAD_COVERS])
def test_bad_books_and_covers_are_refused_and_nothing_is_stored(
        local_stack: Stack, db: Engine, name: str, change: dict[str, Any], status: int,
        param: str) -> None:
    jobs = count_jobs(db)
    files = set(local_stack.media.rglob("*")) if local_stack.media else set()
    with local_stack.client() as http:
        response = http.post("/v1/audio/jobs", json={"input": "Hello."} | change)
    assert response.status_code == status, (name, response.text)
    assert error_of(response)["param"] == param
    assert count_jobs(db) == jobs
    assert (set(local_stack.media.rglob("*")) if local_stack.media else set()) == files


def test_acx_mastering_meets_the_profile_in_every_chapter_file(local_stack: Stack) -> None:
    """Each chapter file, decoded here: 44.1 kHz CBR 192 kbps, RMS -23..-18 dB, peaks under
    -3 dBFS, room tone 0.5-1 s before the first sound and 1-5 s after the last, the quietest
    half second under -60 dB; and the manifest reports the same against the profile."""
    from mutagen.mp3 import MP3, BitrateMode

    from core.audio import decode

    chapters = [{"title": "Dawn", "input": "The boats came in at dawn. Gulls followed them "
                 "home, crying over the grey water. Nobody on the pier said a word."},
                {"title": "Noon", "input": "Fish were sold by noon. The square emptied slowly, "
                 "and the carts rolled back up the hill."}]
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", json={"chapters": chapters, "mastering": "acx",
                                                     "response_format": "mp3"})
        assert created.status_code == 202, created.text
        job = wait_job(http, created.json()["id"])
        assert job["status"] == "completed", job
        files = [http.get(c["url"]).content for c in job["result"]["chapters"]]
        manifest = http.get(job["result"]["manifest_url"]).json()
    assert job["result"]["mastering"] == {"profile": "acx", "ok": True}
    reported = manifest["checks"]["mastering"]["chapters"]
    assert [c["title"] for c in reported] == ["Dawn", "Noon"]
    for data, report in zip(files, reported, strict=True):
        info: Any = MP3(io.BytesIO(data)).info
        assert (info.sample_rate, round(info.bitrate / 1000), info.bitrate_mode) == \
            (44100, 192, BitrateMode.CBR)
        audio, rate = decode(data)
        x = audio.astype(np.float64)
        rms, peak = 20 * np.log10(np.sqrt(np.mean(x ** 2))), 20 * np.log10(np.abs(x).max())
        assert -23 <= rms <= -18
        assert peak <= -3
        hop = rate // 50  # 20 ms windows: sound is louder than -50 dB
        loud = np.flatnonzero([np.sqrt(np.mean(x[i:i + hop] ** 2)) > 10 ** (-50 / 20)
                               for i in range(0, len(x) - hop, hop)])
        assert 0.5 <= loud[0] * hop / rate <= 1.0
        assert 1.0 <= (len(x) - (loud[-1] + 1) * hop) / rate <= 5.0
        half = rate // 2
        quietest = min(np.sqrt(np.mean(x[i:i + half] ** 2)) for i in range(0, len(x) - half, half))
        assert 20 * np.log10(max(quietest, 1e-9)) <= -60
        assert report["ok"], report
        assert abs(report["rms_db"] - rms) < 0.05
        assert abs(report["peak_db"] - peak) < 0.05


def test_acx_mastering_is_refused_for_formats_other_than_mp3(local_stack: Stack, db: Engine,
                                                             ) -> None:
    jobs = count_jobs(db)
    with local_stack.client() as http:
        response = http.post("/v1/audio/jobs", json={"input": "Hello.", "mastering": "acx",
                                                     "response_format": "m4b"})
    assert response.status_code == 400
    assert "192 kbps constant-bitrate MP3" in error_of(response)["message"]
    assert count_jobs(db) == jobs
