"""API keys: required when configured, and a job is visible only to the key that made it."""

import hashlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine

from api.state import KeyTable
from tests.conftest import base_env, count_jobs, error_of
from tests.support import Stack, start_stack


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("keyed")
    env = base_env(tmp, database_url, 13) | {"NARRATOR_API_KEYS": "key-one,key-two"}
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()


def test_missing_or_wrong_key_is_401(keyed: Stack) -> None:
    with keyed.client() as http:
        missing = http.get("/v1/models")
        wrong = http.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert http.get("/healthz").status_code == 200
    assert missing.status_code == 401
    assert error_of(missing)["code"] == "missing_api_key"
    assert wrong.status_code == 401
    assert error_of(wrong)["type"] == "authentication_error"


def test_another_keys_job_is_404(keyed: Stack) -> None:
    one = keyed.client(headers={"Authorization": "Bearer key-one"})
    two = keyed.client(headers={"Authorization": "Bearer key-two"})
    with one, two:
        job = one.post("/v1/audio/jobs", json={"input": "Mine."}).json()
        assert one.get(f"/v1/audio/jobs/{job['id']}").status_code == 200
        for response in (two.get(f"/v1/audio/jobs/{job['id']}"),
                         two.post(f"/v1/audio/jobs/{job['id']}/cancel"),
                         two.delete(f"/v1/audio/jobs/{job['id']}")):
            assert response.status_code == 404
        assert job["id"] not in {j["id"] for j in two.get("/v1/audio/jobs").json()["data"]}
        assert one.post(f"/v1/audio/jobs/{job['id']}/cancel").json()["status"] == "cancelled"


@pytest.fixture(scope="module")
def tabled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict[str, str]]]:
    """An API on its own database (keys there close it), keys made with `narrator keys`."""
    from migrations import upgrade
    from tests.conftest import drop_database, make_database

    name = f"narrator_keys_{uuid.uuid4().hex[:8]}"
    url = make_database(name)
    upgrade(url)
    tmp = tmp_path_factory.mktemp("tabled")
    env = base_env(tmp, url, 15)
    stack = start_stack(tmp, env, worker=False)
    yield stack, env
    stack.stop()
    drop_database(name)


def _narrator(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "narrator", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_keys_from_the_table_open_close_and_revoke(tabled: tuple[Stack, dict[str, str]]) -> None:
    stack, env = tabled
    with stack.client() as http:
        assert http.get("/v1/models").status_code == 200  # no key anywhere: open
    created = _narrator(env, "keys", "create", "--name", "ci")
    assert created.returncode == 0, created.stderr
    key_id, key = created.stdout.split()[0], created.stdout.splitlines()[1]
    assert key.startswith("nk_")
    listed = _narrator(env, "keys", "list").stdout
    assert key_id in listed
    assert key not in listed  # only its first characters
    time.sleep(KeyTable.TTL + 0.5)
    with stack.client() as http:
        assert http.get("/v1/models").status_code == 401  # a key exists: closed
        good = http.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert good.status_code == 200
        job = http.post("/v1/audio/jobs", json={"input": "Mine."},
                        headers={"Authorization": f"Bearer {key}"})
        assert job.status_code == 202
    assert _narrator(env, "keys", "revoke", key_id).returncode == 0
    assert _narrator(env, "keys", "revoke", key_id).returncode == 1  # already revoked
    time.sleep(KeyTable.TTL + 0.5)
    with stack.client() as http:
        revoked = http.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert revoked.status_code == 401
    assert error_of(revoked)["code"] == "invalid_api_key"
    with psycopg.connect(env["NARRATOR_DATABASE_URL"]) as connection:
        stored = connection.execute("SELECT digest FROM api_keys").fetchall()
    assert stored == [(hashlib.sha256(key.encode()).hexdigest(),)]  # never the key itself


def test_a_stored_keys_weight_and_priorities(tabled: tuple[Stack, dict[str, str]]) -> None:
    stack, env = tabled
    created = _narrator(env, "keys", "create", "--name", "editors", "--weight", "3",
                        "--priorities", "normal,high")
    assert created.returncode == 0, created.stderr
    key_id, editors = created.stdout.split()[0], created.stdout.splitlines()[1]
    plain = _narrator(env, "keys", "create", "--name", "crawler").stdout.splitlines()[1]
    assert "weight 3  priorities high,normal" in _narrator(env, "keys", "list").stdout
    bad = _narrator(env, "keys", "set", key_id, "--priorities", "urgent")
    assert bad.returncode == 2
    assert "unknown priority 'urgent'" in bad.stderr
    time.sleep(KeyTable.TTL + 0.5)
    urgent = {"input": "Now, please.", "priority": "high"}
    with stack.client() as http:
        job = http.post("/v1/audio/jobs", json=urgent,
                        headers={"Authorization": f"Bearer {editors}"})
        assert job.status_code == 202, job.text
        refused = http.post("/v1/audio/jobs", json=urgent,
                            headers={"Authorization": f"Bearer {plain}"})
        assert refused.status_code == 403  # JOB_PRIORITIES: normal, low
        assert error_of(refused)["code"] == "priority_not_allowed"
        low = http.post("/v1/audio/jobs", json={"input": "Later.", "priority": "low"},
                        headers={"Authorization": f"Bearer {editors}"})
        assert low.status_code == 403  # its own list replaces the server's
    assert _narrator(env, "keys", "set", key_id, "--weight", "5").returncode == 0
    with psycopg.connect(env["NARRATOR_DATABASE_URL"]) as connection:
        weight = connection.execute("SELECT weight FROM jobs WHERE id = %s",
                                    (uuid.UUID(job.json()["id"].removeprefix("job_")),)).fetchone()
    assert weight == (3,)  # a job keeps the weight its key had when it was submitted


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    """An API (no worker: jobs stay queued) with every per-key limit on."""
    tmp = tmp_path_factory.mktemp("limited")
    env = base_env(tmp, database_url, 15) | {
        "NARRATOR_API_KEYS": "cap-a,cap-b,rate-c", "NARRATOR_RATE_LIMIT_PER_MINUTE": "5",
        "NARRATOR_MAX_ACTIVE_JOBS_PER_KEY": "2", "NARRATOR_MAX_CHARS_PER_DAY_PER_KEY": "60"}
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()


def _as(stack: Stack, key: str) -> Any:
    return stack.client(headers={"Authorization": f"Bearer {key}"})


def test_active_jobs_and_daily_characters_are_capped_per_key(limited: Stack,
                                                             db: Engine) -> None:
    with _as(limited, "cap-a") as a, _as(limited, "cap-b") as b:
        assert [a.post("/v1/audio/jobs", json={"input": "One."}).status_code
                for _ in range(2)] == [202, 202]
        before = count_jobs(db)
        third = a.post("/v1/audio/jobs", json={"input": "Three."})
        assert third.status_code == 429
        assert error_of(third)["code"] == "too_many_active_jobs"
        assert int(third.headers["retry-after"]) > 0
        assert count_jobs(db) == before
        assert b.post("/v1/audio/jobs", json={"input": "x" * 50}).status_code == 202
        over = b.post("/v1/audio/jobs", json={"input": "y" * 20})  # 50 + 20 > 60
    assert over.status_code == 429
    assert error_of(over)["code"] == "daily_quota_exceeded"
    assert error_of(over)["type"] == "rate_limit_error"


def test_requests_per_minute_are_limited_per_key(limited: Stack) -> None:
    if time.time() % 60 > 50:  # one fixed window for the whole test
        time.sleep(61 - time.time() % 60)
    with _as(limited, "rate-c") as c, _as(limited, "cap-a") as a:
        codes = [c.get("/v1/audio/jobs").status_code for _ in range(6)]
        assert a.get("/v1/audio/jobs").status_code == 200  # another key's own budget
        last = c.get("/v1/audio/jobs")
    assert codes == [200] * 5 + [429]
    assert error_of(last)["code"] == "rate_limit_exceeded"
    assert 0 < int(last.headers["retry-after"]) <= 61


def test_another_keys_word_times_are_a_404(tmp_path_factory: pytest.TempPathFactory,
                                          database_url: str) -> None:
    """A completed job's content, its `subtitles_words` word times among it, is its key's
    alone: the owner gets the words, another key a 404 for every variant, as if the job were
    not there."""
    import redis

    from tests.conftest import redis_url
    from tests.support import wait_job

    redis.Redis.from_url(redis_url(14)).flushdb()  # nothing left by another module's stack
    tmp = tmp_path_factory.mktemp("keyed_words")
    env = base_env(tmp, database_url, 14) | {"NARRATOR_API_KEYS": "key-one,key-two"}
    stack = start_stack(tmp, env)
    try:
        one = stack.client(headers={"Authorization": "Bearer key-one"})
        two = stack.client(headers={"Authorization": "Bearer key-two"})
        with one, two:
            job = one.post("/v1/audio/jobs", json={
                "input": "The words are mine. Nobody else may read them.",
                "subtitles": ["srt", "words"], "response_format": "wav"}).json()
            done = wait_job(one, job["id"], timeout=120)
            assert done["status"] == "completed", done
            url = f"/v1/audio/jobs/{job['id']}/content"
            words = one.get(url, params={"variant": "subtitles_words"})
            assert words.status_code == 200
            assert [w["word"] for w in words.json()["words"]][:3] == ["the", "words", "are"]
            for variant in ("subtitles_words", "audio", "subtitles_srt", "manifest"):
                other = two.get(url, params={"variant": variant})
                assert other.status_code == 404, (variant, other.text)
                assert error_of(other)["type"] == "invalid_request_error"
    finally:
        stack.stop()
