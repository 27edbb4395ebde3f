"""A book-like job end to end: Markdown chapters delivered to S3 with subtitles and a webhook."""

import itertools
import json
import re
import uuid

import boto3
import httpx

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
                "subtitles": ["srt", "vtt"], "webhook_url": receiver.url,
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
        assert abs(times[-1][1] - duration) < 0.05  # the last cue ends with the audio
    # one cue per sentence, written as in the book (the engine heard "Doctor", "1921" in words)
    assert "Dr. Marsh climbed the 112 steps at 6:45 p.m. on March 3, 1921." in srt
    assert "The lamp was cold." in srt
    assert len(_cue_times(srt)) == 7

    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    prefix = f"deliveries/books/jobs/{uuid.UUID(hex=job['id'].removeprefix('job_'))}/"
    listed = client.list_objects_v2(Bucket=s3["bucket"], Prefix=prefix)
    keys = {obj["Key"].removeprefix(prefix) for obj in listed["Contents"]}
    assert keys == {"audio.mp3", "subtitles.srt", "subtitles.vtt", "manifest.json",
                    "chapters/000.mp3", "chapters/001.mp3"}  # and no parts left behind
