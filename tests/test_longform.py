"""A book-like job end to end: Markdown chapters delivered to S3 with subtitles (cues from
aligned words) and a webhook."""

import itertools
import json
import re
import uuid

import boto3
import httpx
import pytest

from tests.support import Stack, audio_stats, wait_for, wait_job
from tests.test_webhooks import Receiver, verify

BOOK = """# The Lighthouse
Dr. Marsh climbed the 112 steps at 6:45 p.m. on March 3, 1921. The lamp was cold.

She lit it anyway. Out at sea, a bell answered.

# The Keeper's Log
Entry one: the wind came from the north, and the glass fell all evening.

Entry two: nothing but fog, and the long call of the horn [pause:1s] every minute.
"""
CUE = re.compile(r"(\d\d):(\d\d):(\d\d)[,.](\d{3}) --> (\d\d):(\d\d):(\d\d)[,.](\d{3})")


def _cue_times(subtitles: str) -> list[tuple[float, float]]:
    def seconds(h: str, m: str, s: str, ms: str) -> float:
        return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000

    return [(seconds(*match[:4]), seconds(*match[4:])) for match in CUE.findall(subtitles)]


def test_markdown_book_to_s3_with_subtitles_and_a_signed_webhook(s3_stack: Stack) -> None:
    s3 = s3_stack.extra
    receiver = Receiver()
    try:
        with s3_stack.client() as http:
            created = http.post("/v1/audio/jobs", json={
                "input": BOOK, "input_format": "markdown", "response_format": "mp3",
                "subtitles": ["srt", "vtt", "words"], "webhook_url": receiver.url,
                "output_url": f"s3://{s3['bucket']}/deliveries/books"})
            assert created.status_code == 202, created.text
            job = wait_job(http, created.json()["id"])
        assert job["status"] == "completed", job
        wait_for(lambda: len(receiver.calls) >= 1, 60, "the webhook")
        headers, body = receiver.calls[0]
    finally:
        receiver.close()
    verify(headers, body)  # signed with the shared secret
    assert json.loads(body)["status"] == "completed"

    result = job["result"]
    assert [c["title"] for c in result["chapters"]] == ["The Lighthouse", "The Keeper's Log"]
    audio = httpx.get(result["url"])  # presigned: straight from S3
    assert audio.status_code == 200
    duration, rms = audio_stats(audio.content, "mp3")
    assert rms > 0.02
    srt = httpx.get(result["subtitles"]["srt"]).text
    vtt = httpx.get(result["subtitles"]["vtt"]).text
    for subtitles in (srt, vtt):
        times = _cue_times(subtitles)
        assert all(start < end for start, end in times)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(times))
        # Cues come from aligned words: the last ends with the last word, before the audio.
        assert duration - 1.0 < times[-1][1] <= duration
    # one cue per sentence, written as in the book (the engine heard "Doctor", "1921" in words)
    assert "\nDr. Marsh climbed the 112 steps\nat 6:45 p.m. on March 3, 1921.\n" in srt  # 2 lines
    assert "The lamp was cold." in srt
    assert len(_cue_times(srt)) == 7
    manifest = httpx.get(result["manifest_url"]).json()
    assert manifest["timing"] == {"aligned": len(manifest["segments"]), "estimated": 0}
    # Word times in the book's time: every word the engine spoke, in order, each inside its
    # segment's span, the last ending before the audio does.
    track = httpx.get(result["subtitles"]["words"]).json()
    assert track["estimated_segments"] == []
    words = track["words"]
    spans = {s["index"]: (s["start_seconds"], s["start_seconds"] + s["duration_seconds"])
             for s in manifest["segments"]}
    assert all(spans[w["segment"]][0] - 1e-3 <= w["start"] < w["end"]  # times in ms
               <= spans[w["segment"]][1] + 1e-3 for w in words)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))
    assert words[-1]["end"] <= duration
    assert [w["word"] for w in words[:4]] == ["doctor", "marsh", "climbed", "the"]
    # Cues start with their sentence's first word.
    assert times[0][0] == pytest.approx(words[0]["start"], abs=2e-3)

    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    prefix = f"deliveries/books/jobs/{uuid.UUID(hex=job['id'].removeprefix('job_'))}/"
    listed = client.list_objects_v2(Bucket=s3["bucket"], Prefix=prefix)
    keys = {obj["Key"].removeprefix(prefix) for obj in listed["Contents"]}
    assert keys == {"audio.mp3", "subtitles.srt", "subtitles.vtt", "subtitles.words.json",
                    "manifest.json",
                    "chapters/000.mp3", "chapters/001.mp3"}  # and no parts left behind
