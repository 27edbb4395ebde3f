"""`POST /v1/audio/jobs/batch`: many ordinary jobs in one request, all or none.

Real API and worker on Postgres and Redis (the local stack), Piper speaking the jobs.
"""

import json
import threading
from typing import Any

import httpx
from sqlalchemy import Engine

from tests.conftest import count_jobs, error_of
from tests.support import Stack, wait_job

JOBS: list[dict[str, Any]] = [
    {"input": "The first letter arrived on a Monday.", "response_format": "wav"},
    {"input": "The second came by boat.", "response_format": "mp3", "subtitles": ["srt"],
     "metadata": {"n": 2}},
    {"chapters": [{"title": "One", "input": "A third, in chapters."},
                  {"title": "Two", "input": "It ends here."}], "response_format": "flac"},
]


def test_a_batch_creates_ordinary_jobs_in_order(local_stack: Stack, db: Engine) -> None:
    before = count_jobs(db)
    with local_stack.client() as http:
        made = http.post("/v1/audio/jobs/batch", json=JOBS)
        assert made.status_code == 202, made.text
        answer = made.json()
        assert answer["object"] == "audio.job.batch"
        assert answer["count"] == 3
        jobs = [wait_job(http, job_id) for job_id in answer["ids"]]
    assert count_jobs(db) == before + 3
    assert [j["status"] for j in jobs] == ["completed"] * 3
    assert [j["response_format"] for j in jobs] == ["wav", "mp3", "flac"]
    assert jobs[1]["metadata"] == {"n": 2}
    assert jobs[0]["usage"]["input_characters"] == len(JOBS[0]["input"])
    assert [c["title"] for c in jobs[2]["result"]["chapters"]] == ["One", "Two"]


def test_jsonl_bodies_and_uploads_are_taken(local_stack: Stack) -> None:
    lines = "\n".join(json.dumps(j) for j in JOBS[:2]) + "\n"
    with local_stack.client() as http:
        body = http.post("/v1/audio/jobs/batch", content=lines,
                         headers={"Content-Type": "application/jsonl"})
        upload = http.post("/v1/audio/jobs/batch",
                           files={"file": ("batch.jsonl", lines, "application/jsonl")})
        wrapped = http.post("/v1/audio/jobs/batch", json={"jobs": JOBS[:1]})
        for made, count in ((body, 2), (upload, 2), (wrapped, 1)):
            assert made.status_code == 202, made.text
            assert made.json()["count"] == count
        assert wait_job(http, upload.json()["ids"][1])["status"] == "completed"


def test_one_bad_body_refuses_the_whole_batch_and_stores_nothing(local_stack: Stack,
                                                                 db: Engine) -> None:
    before = count_jobs(db)
    cases: list[tuple[Any, str | None, str]] = [
        ([JOBS[0], JOBS[1], {"response_format": "wav"}], "jobs.2.input", "missing input"),
        ([JOBS[0], {**JOBS[0], "voice": "nobody"}], "jobs.1.voice", "unknown voice"),
        ([JOBS[0], {**JOBS[0], "speed": 9}], "jobs.1.speed", "speed out of range"),
        ([JOBS[0], {**JOBS[0], "cover": "aGk="}], "jobs.1.cover", "a cover"),
        ([], "jobs", "empty"),
        ([{"input": "x"}] * 10_001, "jobs", "over 10,000"),
        ({"jobs": "nope"}, "jobs", "not a list"),
    ]
    with local_stack.client() as http:
        for body, param, why in cases:
            refused = http.post("/v1/audio/jobs/batch", json=body)
            assert refused.status_code == 400, (why, refused.text)
            assert error_of(refused)["param"] == param, why
        broken = http.post("/v1/audio/jobs/batch", content=b'{"input": "a"}\n{oops',
                           headers={"Content-Type": "application/x-ndjson"})
        assert broken.status_code == 400
        assert error_of(broken)["code"] == "invalid_json"
    assert count_jobs(db) == before


def test_one_idempotency_key_covers_the_batch(local_stack: Stack, db: Engine) -> None:
    headers = {"Idempotency-Key": "nightly-import-7"}
    with local_stack.client() as http:
        first = http.post("/v1/audio/jobs/batch", json=JOBS, headers=headers)
        assert first.status_code == 202
        counted = count_jobs(db)
        again = http.post("/v1/audio/jobs/batch", json=JOBS, headers=headers)
        assert again.status_code == 202
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["ids"] == first.json()["ids"]
        other = http.post("/v1/audio/jobs/batch", json=JOBS[:2], headers=headers)
        assert other.status_code == 409
        assert error_of(other)["code"] == "idempotency_key_reused"
    assert count_jobs(db) == counted


def test_the_same_batch_sent_twice_at_once_is_created_once(local_stack: Stack,
                                                          db: Engine) -> None:
    before = count_jobs(db)
    headers = {"Idempotency-Key": "race-batch"}
    answers: list[httpx.Response] = []
    start = threading.Barrier(4)

    def send() -> None:
        with local_stack.client() as http:
            start.wait()
            answers.append(http.post("/v1/audio/jobs/batch", json=JOBS, headers=headers))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a.status_code for a in answers] == [202] * 4
    assert len({tuple(a.json()["ids"]) for a in answers}) == 1
    assert count_jobs(db) == before + 3
