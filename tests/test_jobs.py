"""Async jobs end to end: real worker, Postgres, Redis, Piper, local disk and S3."""

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import httpx
import pyloudnorm
import pytest
from sqlalchemy import Engine, text

from core.audio import decode
from tests.conftest import count_jobs, error_of
from tests.epub_maker import make_epub
from tests.support import PIPER_IN_FLIGHT, Stack, audio_stats, wait_for, wait_job

BOOK = {
    "chapters": [
        {"title": "The Start", "input": "It was a quiet morning. The kettle sang.\n\n"
                                        "Nobody answered the door."},
        {"title": "The End", "input": "By noon the rain had stopped. Everyone went home."},
    ],
    "response_format": "mp3",
    "subtitles": ["srt", "vtt"],
    "metadata": {"book": "test", "n": 1},
}


def _uuid(job_id: str) -> str:
    return str(uuid.UUID(hex=job_id.removeprefix("job_")))


def test_chaptered_job_completes_to_local_disk(local_stack: Stack, db: Engine) -> None:
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", json=BOOK)
        assert created.status_code == 202
        job = created.json()
        assert created.headers["location"] == f"/v1/audio/jobs/{job['id']}"
        assert job["status"] == "queued"
        assert job["metadata"] == BOOK["metadata"]
        job = wait_job(http, job["id"])
        assert job["status"] == "completed", job
        assert job["progress"] == 100
        assert job["segments"]["done"] == job["segments"]["total"]
        result = job["result"]
        audio = http.get(result["url"])
        assert audio.headers["content-type"] == "audio/mpeg"
        duration, rms = audio_stats(audio.content, "mp3")
        assert abs(duration - result["duration_seconds"]) < 0.1
        assert rms > 0.02
        assert result["bytes"] == len(audio.content)
        assert [c["title"] for c in result["chapters"]] == ["The Start", "The End"]
        second = result["chapters"][1]
        assert second["start_seconds"] > result["chapters"][0]["duration_seconds"]
        chapter_audio = http.get(second["url"])
        chapter_seconds, _ = audio_stats(chapter_audio.content, "mp3")
        assert abs(chapter_seconds - second["duration_seconds"]) < 0.1
        srt = http.get(result["subtitles"]["srt"]).text
        vtt = http.get(result["subtitles"]["vtt"]).text
        # The first cue starts where the first word does: Piper's durations place it
        # after the part's leading silence, a few tens of milliseconds in.
        assert re.match(r"1\n00:00:00,[0-2]\d\d --> ", srt), srt[:40]
        assert "The kettle sang." in srt
        assert re.match(r"WEBVTT\n\n00:00:00\.[0-2]\d\d --> ", vtt), vtt[:40]
        manifest = http.get(result["manifest_url"]).json()
    segments = manifest["segments"]
    assert [s["chapter"] for s in segments] == [0, 0, 1]
    assert all(s["attempts"] == 1 for s in segments)
    last = segments[-1]
    assert abs(last["start_seconds"] + last["duration_seconds"] - duration) < 0.1
    assert manifest["usage"]["input_characters"] == job["usage"]["input_characters"]
    assert local_stack.media is not None
    folder = local_stack.media / "jobs" / _uuid(job["id"])
    assert (folder / "audio.mp3").stat().st_size == result["bytes"]
    assert len(list((folder / "parts").glob("*.wav"))) == 3  # kept for re-renders
    with db.connect() as connection:
        events = connection.execute(text(
            "SELECT from_status, to_status FROM job_events WHERE job_id = :id ORDER BY id"),
            {"id": _uuid(job["id"])}).all()
    assert [tuple(e) for e in events] == [("queued", "in_progress"),
                                          ("in_progress", "completed")]


def test_job_completes_to_s3_with_presigned_urls(s3_stack: Stack) -> None:
    with s3_stack.client() as http:
        job = http.post("/v1/audio/jobs", json={"input": "Stored in S3. Fetched by URL.",
                                                "response_format": "flac",
                                                "subtitles": ["vtt"]}).json()
        job = wait_job(http, job["id"])
    assert job["status"] == "completed", job
    result = job["result"]
    assert "X-Amz-Signature=" in result["url"]
    audio = httpx.get(result["url"])  # no API key, no API: straight from S3
    assert audio.status_code == 200
    duration, rms = audio_stats(audio.content, "flac")
    assert abs(duration - result["duration_seconds"]) < 0.01
    assert rms > 0.02
    assert httpx.get(result["subtitles"]["vtt"]).text.startswith("WEBVTT")
    samples, rate = decode(audio.content)
    loudness = pyloudnorm.Meter(rate).integrated_loudness(samples.astype("float64"))
    assert abs(loudness + 16.0) < 1.0  # parts are normalised to -16 LUFS
    s3 = s3_stack.extra
    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    key = f"narrator/jobs/{_uuid(job['id'])}/audio.flac"
    assert client.head_object(Bucket=s3["bucket"], Key=key)["ContentLength"] == result["bytes"]
    with s3_stack.client() as http:
        streamed = http.get(f"/v1/audio/jobs/{job['id']}/content")
        assert streamed.content == audio.content
        assert http.delete(f"/v1/audio/jobs/{job['id']}").json()["deleted"] is True
    with pytest.raises(client.exceptions.ClientError):
        client.head_object(Bucket=s3["bucket"], Key=key)


def test_list_pages_newest_first_with_a_cursor(local_stack: Stack) -> None:
    with local_stack.client() as http:
        ids = [http.post("/v1/audio/jobs", json={"input": f"Listing job {n}."}).json()["id"]
               for n in range(3)]
        first = http.get("/v1/audio/jobs", params={"limit": 2}).json()
        assert first["object"] == "list"
        assert first["has_more"] is True
        assert [j["id"] for j in first["data"]] == [ids[2], ids[1]]
        second = http.get("/v1/audio/jobs", params={"limit": 1, "after": first["last_id"]})
        assert [j["id"] for j in second.json()["data"]] == [ids[0]]
        for job_id in ids:
            wait_job(http, job_id)
        done = http.get("/v1/audio/jobs", params={"status": "completed", "limit": 100}).json()
        assert set(ids) <= {j["id"] for j in done["data"]}


def test_idempotency_key_returns_the_same_job(local_stack: Stack, db: Engine) -> None:
    key = {"Idempotency-Key": f"key-{uuid.uuid4()}"}
    body: dict[str, Any] = {"input": "Only once, please."}
    with local_stack.client() as http:
        before = count_jobs(db)
        first = http.post("/v1/audio/jobs", json=body, headers=key)
        again = http.post("/v1/audio/jobs", json=body, headers=key)
        assert first.status_code == again.status_code == 202
        assert first.json()["id"] == again.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        other = http.post("/v1/audio/jobs", json={"input": "Something else."}, headers=key)
        assert other.status_code == 409
        assert error_of(other)["code"] == "idempotency_key_reused"
        assert count_jobs(db) == before + 1
        wait_job(http, first.json()["id"])


def _running(db: Engine, job_id: str) -> int:
    with db.connect() as connection:
        return int(connection.execute(text(
            "SELECT count(*) FROM segments WHERE job_id = :id AND status = 'running'"),
            {"id": _uuid(job_id)}).scalar_one())


def test_cancel_mid_job_stops_synthesis(local_stack: Stack, db: Engine) -> None:
    paragraph = "This sentence is here to make the job long enough to cancel. " * 6
    body = {"input": "\n\n".join([paragraph] * 20), "response_format": "wav"}
    with local_stack.client() as http:
        job = http.post("/v1/audio/jobs", json=body).json()
        running = wait_job(http, job["id"], until=("in_progress",))
        deadline = time.monotonic() + 60
        while running["segments"]["done"] < 1 and time.monotonic() < deadline:
            running = http.get(f"/v1/audio/jobs/{job['id']}").json()
        queue, segments = running["queue"], running["segments"]
        assert queue["waiting"] > 0  # 20 segments, a few dispatched at a time
        assert queue["waiting"] + queue["in_flight"] + segments["done"] <= segments["total"]
        cancelled = http.post(f"/v1/audio/jobs/{job['id']}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        done_at_cancel = cancelled.json()["segments"]["done"]
        time.sleep(4)  # long enough for several more segments, had they not been stopped
        # The segments in flight at the cancel (one per core on Piper) still finish.
        wait_for(lambda: _running(db, job["id"]) == 0, 60, "the segments in flight")
        final = http.get(f"/v1/audio/jobs/{job['id']}").json()
        assert final["status"] == "cancelled"
        assert final["queue"] is None  # shown while a job is in progress
        assert final["segments"]["done"] <= done_at_cancel + PIPER_IN_FLIGHT
        assert final["segments"]["total"] > final["segments"]["done"] + 5
        content = http.get(f"/v1/audio/jobs/{job['id']}/content")
        assert content.status_code == 409
        assert error_of(content)["code"] == "job_not_completed"
        again = http.post(f"/v1/audio/jobs/{job['id']}/cancel")
        assert again.status_code == 200
    with db.connect() as connection:
        counts: dict[str, int] = dict(connection.execute(text(
            "SELECT status, count(*) FROM segments WHERE job_id = :id GROUP BY status"),
            {"id": _uuid(job["id"])}).all())
    assert counts.get("running", 0) == 0
    assert counts.get("done", 0) == final["segments"]["done"]


def test_cancel_after_completion_is_a_conflict(local_stack: Stack) -> None:
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={"input": "Quick."}).json()["id"])
        response = http.post(f"/v1/audio/jobs/{job['id']}/cancel")
    assert response.status_code == 409
    assert error_of(response)["code"] == "job_finished"


def test_delete_removes_media_and_hides_the_job(local_stack: Stack) -> None:
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={"input": "Delete me."}
                                       ).json()["id"])
        assert local_stack.media is not None
        folder = local_stack.media / "jobs" / _uuid(job["id"])
        assert folder.exists()
        deleted = http.delete(f"/v1/audio/jobs/{job['id']}")
        assert deleted.json() == {"id": job["id"], "object": "audio.job.deleted",
                                  "deleted": True}
        assert not folder.exists()
        missing = http.get(f"/v1/audio/jobs/{job['id']}")
        assert (missing.status_code == 404 and error_of(missing)["type"] == "not_found_error") \
            or error_of(missing)["code"] == "not_found"


@pytest.mark.parametrize("job_id", ["job_" + "0" * 32, "not-a-job", "job_zz"])
def test_unknown_job_is_404(local_stack: Stack, job_id: str) -> None:
    with local_stack.client() as http:
        for response in (http.get(f"/v1/audio/jobs/{job_id}"),
                         http.get(f"/v1/audio/jobs/{job_id}/content"),
                         http.post(f"/v1/audio/jobs/{job_id}/cancel"),
                         http.delete(f"/v1/audio/jobs/{job_id}")):
            assert response.status_code == 404
            assert error_of(response)["param"] == "job_id"


def test_manifest_is_valid_json_with_settings(local_stack: Stack) -> None:
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={
            "input": "Manifest check.", "speed": 1.25}).json()["id"])
        manifest = json.loads(http.get(f"/v1/audio/jobs/{job['id']}/content",
                                       params={"variant": "manifest"}).content)
        missing = http.get(f"/v1/audio/jobs/{job['id']}/content",
                           params={"variant": "subtitles_srt"})
    assert manifest["speed"] == 1.25
    assert manifest["voice"] == "joe"
    assert missing.status_code == 404


def test_output_url_delivers_under_an_allowed_prefix(s3_stack: Stack) -> None:
    s3 = s3_stack.extra
    target = f"s3://{s3['bucket']}/deliveries/customer-a"
    with s3_stack.client() as http:
        job = http.post("/v1/audio/jobs", json={"input": "Delivered elsewhere.",
                                                "output_url": target}).json()
        job = wait_job(http, job["id"])
        assert job["status"] == "completed", job
        assert httpx.get(job["result"]["url"]).status_code == 200
        refused = [http.post("/v1/audio/jobs", json={"input": "No.", "output_url": url})
                   for url in (f"s3://{s3['bucket']}/other", f"s3://{s3['bucket']}/deliveries-x",
                               f"s3://{s3['bucket']}/deliveries/../secret", "file:///etc")]
    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    key = f"deliveries/customer-a/jobs/{_uuid(job['id'])}/audio.mp3"
    assert client.head_object(Bucket=s3["bucket"], Key=key)["ContentLength"] == \
        job["result"]["bytes"]
    for response in refused:
        assert response.status_code == 400
        assert error_of(response)["param"] == "output_url"


MARKDOWN = """A short preface, *read first*.

# The Harbour
The boats came in **late**. See [the chart](http://example.com/chart).

```
code_is_not_read()
```

## The Storm
Rain fell all night.
"""


def test_markdown_headings_become_chapters(local_stack: Stack) -> None:
    with local_stack.client() as http:
        job = http.post("/v1/audio/jobs", json={"input": MARKDOWN, "input_format": "markdown",
                                                "subtitles": ["srt"]}).json()
        job = wait_job(http, job["id"])
        assert job["status"] == "completed", job
        srt = http.get(job["result"]["subtitles"]["srt"]).text
    titles = [c["title"] for c in job["result"]["chapters"]]
    assert titles == ["Chapter 1", "The Harbour", "The Storm"]
    assert "\nThe boats came in late.\n\n" in srt  # a cue per sentence
    assert "\nSee the chart.\n" in srt
    assert "*" not in srt
    assert "](" not in srt
    assert "code_is_not_read" not in srt


@pytest.mark.parametrize(("fmt", "within"), [("wav", 0.001), ("mp3", 576 / 2 / 22050)])
def test_inline_pause_marks_become_silence(local_stack: Stack, fmt: str, within: float) -> None:
    """Exact, except that MP3 puts each segment on the nearest encoder frame (fragments.py)."""
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={
            "input": "Before the pause. [pause:2.5s] After the pause.",
            "response_format": fmt}).json()["id"])
        manifest = http.get(job["result"]["manifest_url"]).json()
    first, second = manifest["segments"]
    gap = second["start_seconds"] - first["start_seconds"] - first["duration_seconds"]
    assert abs(gap - 2.5) < within


@pytest.mark.parametrize("version", [3, 2])
def test_epub_upload_becomes_a_chaptered_job(local_stack: Stack, version: int) -> None:
    book = make_epub([("Arrival", "The train was late.\n\nNobody waited on the platform."),
                      ("Departure", "They left at dawn.")], version)
    request = json.dumps({"response_format": "wav", "subtitles": ["vtt"]})
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", data={"request": request},
                            files={"file": ("book.epub", book, "application/epub+zip")})
        assert created.status_code == 202, created.text
        job = wait_job(http, created.json()["id"])
        assert job["status"] == "completed", job
        vtt = http.get(job["result"]["subtitles"]["vtt"]).text
    assert [c["title"] for c in job["result"]["chapters"]] == ["Arrival (toc)",
                                                               "Departure (toc)"]
    assert "Nobody waited on the platform." in vtt
    assert "ignored()" not in vtt


def test_bad_epub_uploads_are_400(local_stack: Stack, db: Engine) -> None:
    before = count_jobs(db)
    with local_stack.client() as http:
        not_zip = http.post("/v1/audio/jobs", files={"file": ("a.epub", b"hello", "x/y")})
        both = http.post("/v1/audio/jobs", data={"request": json.dumps({"input": "x"})},
                         files={"file": ("a.epub", make_epub([("A", "b")]), "x/y")})
        no_file = http.post("/v1/audio/jobs", data={"request": "{}"},
                            files={"other": ("a.txt", b"x", "text/plain")})
        oversize = http.post("/v1/audio/jobs", files={  # over MAX_BODY_BYTES (32 MiB)
            "file": ("big.epub", b"\0" * (32 * 1024 * 1024 + 1), "application/epub+zip")})
    assert oversize.status_code == 413, oversize.text
    assert error_of(oversize)["type"] == "invalid_request_error"
    assert not_zip.status_code == 400
    assert "not an EPUB" in error_of(not_zip)["message"]
    assert both.status_code == 400
    assert no_file.status_code == 400
    assert error_of(no_file)["param"] == "file"
    assert count_jobs(db) == before


def test_m4b_job_carries_chapter_marks(local_stack: Stack, tmp_path: Path) -> None:
    import av

    body = {"chapters": [{"title": "Opening", "input": "The first chapter begins."},
                         {"title": "Closing", "input": "The second chapter ends it."}],
            "response_format": "m4b"}
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json=body).json()["id"])
        assert job["status"] == "completed", job
        response = http.get(job["result"]["url"])
    assert response.headers["content-type"] == "audio/mp4"
    path = tmp_path / "book.m4b"
    path.write_bytes(response.content)
    with av.open(str(path)) as container:
        marks = container.chapters()
        seconds = float(container.duration or 0) / 1e6
    assert [m["metadata"]["title"] for m in marks] == ["Opening", "Closing"]
    second = job["result"]["chapters"][1]
    base = marks[1]["time_base"]
    assert base is not None
    assert abs(float(marks[1]["start"] * base) - second["start_seconds"]) < 0.01
    assert abs(seconds - job["result"]["duration_seconds"]) < 0.15


def test_m4b_is_refused_for_sync_speech(local_stack: Stack) -> None:
    with local_stack.client() as http:
        response = http.post("/v1/audio/speech", json={"input": "Hi.", "response_format": "m4b"})
    assert response.status_code == 400
    assert error_of(response)["param"] == "response_format"


def test_mp3_fragments_are_encoded_by_the_worker_while_the_job_runs(local_stack: Stack) -> None:
    """A real worker (Piper, which also takes the assembly queue) encodes each finished
    segment's fragment as its own task; the assembly then only joins them."""
    text = " ".join(f"Sentence number {n} of a job long enough for several segments."
                    for n in range(40))
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={"input": text}).json()["id"])
        assert job["status"] == "completed"
        manifest = http.get(job["result"]["manifest_url"]).json()
        audio = http.get(job["result"]["url"]).content
    decoded, rate = decode(audio)
    assert len(decoded) == round(job["result"]["duration_seconds"] * rate)
    events = [json.loads(line) for line in local_stack.worker.log.read_text().splitlines()
              if '"fragment.encoded"' in line]
    internal = str(uuid.UUID(job["id"].removeprefix("job_")))
    mine = {e["first"] for e in events if e.get("job_id") == internal}
    segments = len(manifest["segments"])
    assert segments >= 3
    assert len(mine) >= segments - 1  # every fragment but (perhaps) the last, ahead of time


def test_a_job_gets_only_a_priority_its_key_may_ask_for(local_stack: Stack, db: Engine) -> None:
    """NARRATOR_JOB_PRIORITIES (default normal,low): `high` is refused and nothing stored;
    `low` is kept, shown, and still runs."""
    with local_stack.client() as http:
        before = count_jobs(db)
        high = http.post("/v1/audio/jobs", json={"input": "Me first.", "priority": "high"})
        assert high.status_code == 403
        assert error_of(high)["code"] == "priority_not_allowed"
        assert count_jobs(db) == before
        low = http.post("/v1/audio/jobs", json={"input": "Whenever.", "priority": "low"})
        assert low.status_code == 202
        assert low.json()["priority"] == "low"
        assert wait_job(http, low.json()["id"])["status"] == "completed"
