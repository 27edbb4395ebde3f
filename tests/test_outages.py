"""A dependency that is down gives a 503 with Retry-After, never a 500, and stores nothing."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from models.base import uuid7
from tests.conftest import base_env, count_jobs, error_of
from tests.support import Stack, free_port, start_stack


@pytest.fixture(scope="module")
def no_broker(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("no-broker")
    env = base_env(tmp, database_url, 0) | {
        "NARRATOR_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def no_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("no-database")
    env = base_env(tmp, f"postgresql://postgres@127.0.0.1:{free_port()}/none", 0)
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()


def test_broker_down_job_is_not_created(no_broker: Stack, db: Engine) -> None:
    before = count_jobs(db)
    with no_broker.client() as http:
        response = http.post("/v1/audio/jobs", json={"input": "Hello."})
        assert response.status_code == 503
        assert response.headers["retry-after"]
        assert "not created" in error_of(response)["message"]
        ready = http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["broker"].startswith("error")
        assert http.get("/healthz").status_code == 200
    assert count_jobs(db) == before


def test_broker_down_sync_speech_is_503(no_broker: Stack) -> None:
    with no_broker.client() as http:
        response = http.post("/v1/audio/speech", json={"input": "Hello."})
    assert response.status_code == 503
    assert response.headers["retry-after"]
    assert error_of(response)["type"] == "service_unavailable"


def test_database_down_is_503_not_500(no_database: Stack, tmp_path: Path) -> None:
    with no_database.client() as http:
        for response in (http.get("/v1/audio/jobs"),
                         http.post("/v1/audio/jobs", json={"input": "Hello."}),
                         http.get("/v1/audio/jobs/job_" + "1" * 32)):
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert error_of(response)["code"] == "dependency_unavailable"
        ready = http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"].startswith("error")


def test_storage_down_is_a_503_that_names_storage(tmp_path: Path, database_url: str,
                                                  db: Engine) -> None:
    env = base_env(tmp_path, database_url, 0) | {
        "NARRATOR_STORAGE_URL": "s3://narrator/media",
        "NARRATOR_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "NARRATOR_S3_ACCESS_KEY_ID": "key", "NARRATOR_S3_SECRET_ACCESS_KEY": "secret"}
    stack = start_stack(tmp_path, env, worker=False)
    job_id = uuid7()
    with db.begin() as connection:  # a completed job whose media sits in that store
        connection.execute(text(
            "INSERT INTO jobs (id, owner, status, model, voice, response_format, speed, options,"
            " chapters, metadata, input_characters, segments_total, segments_done,"
            " segments_failed, audio_seconds, created_at, updated_at, chars_done, result)"
            " VALUES (:id, '', 'completed', 'piper', 'joe', 'wav', 1.0, '{}', '[]', '{}', 1,"
            " 1, 1, 0, 1.0, now(), now(), 1, :result)"),
            {"id": job_id, "result": '{"key": "jobs/x/audio.wav", "duration_seconds": 1.0,'
                                     ' "chapters": [], "subtitles": {}}'})
    try:
        with stack.client() as http:
            response = http.get(f"/v1/audio/jobs/job_{job_id.hex}/content")
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        error = error_of(response)
        assert error["code"] == "dependency_unavailable"
        assert "storage" in error["message"]
        assert "database" not in error["message"]
    finally:
        stack.stop()
