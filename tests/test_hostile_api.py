"""Hostile and careless requests against a real `narrator api`, on SQLite and on Postgres.

Each is a 4xx in OpenAI's error shape with nothing stored, never a 500 and never a stall:
bodies past their size or time, values a database refuses, caps hit by many submits at once,
a burst that once took the whole connection pool, wrong keys, cross-site posts. The API runs
without a worker (nothing here needs audio), with two keys per test and the default limits
unless a test names one.
"""

import contextlib
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import text

from models.db import sql_engine_for
from tests.conftest import base_env, drop_database, error_of, make_database, redis_url
from tests.support import Stack, narrator, start_stack

KEYS = {name: f"nk_test_{name}_{uuid.uuid4().hex[:8]}" for name in (
    "plain", "active", "quota", "other")}
CAPS = {"NARRATOR_MAX_ACTIVE_JOBS_PER_KEY": "3", "NARRATOR_MAX_CHARS_PER_DAY_PER_KEY": "600"}


def _stack(tmp: Path, kind: str, extra: dict[str, str]) -> tuple[Stack, str]:
    """Start `narrator api` (no worker) on a database of its own; return it and the name of
    its Postgres database ('' for SQLite, whose DATA_DIR the API creates itself)."""
    from migrations import upgrade

    redis.Redis.from_url(redis_url(9)).flushdb()  # the per-address counts of wrong keys
    name = ""
    if kind == "postgres":
        name = f"narrator_hostile_{uuid.uuid4().hex[:8]}"
        url = make_database(name)
        upgrade(url)
        env = base_env(tmp, url, 9)
    else:
        env = {k: v for k, v in base_env(tmp / "data", "", 9).items()
               if k not in ("NARRATOR_DATABASE_URL", "NARRATOR_BROKER_URL")}
        url = f"sqlite:///{tmp / 'data' / 'narrator.db'}"
        subprocess.run(narrator("migrate"), env=env, check=True, capture_output=True)
    env |= {"NARRATOR_API_KEYS": ",".join(KEYS.values())} | extra
    stack = start_stack(tmp, env, worker=False)
    stack.extra = {"db": url, "kind": kind, "data": tmp / "data"}
    return stack, name


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Stack]:
    """`narrator api` with keys and the default limits (no per-key caps)."""
    stack, name = _stack(tmp_path_factory.mktemp(f"hostile-{request.param}"), request.param, {})
    yield stack
    stack.stop()
    if name:
        drop_database(name)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def capped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Stack]:
    """The same with per-key caps: 3 active jobs, 600 characters a day."""
    stack, name = _stack(tmp_path_factory.mktemp(f"capped-{request.param}"), request.param,
                         CAPS)
    yield stack
    stack.stop()
    if name:
        drop_database(name)


def client(stack: Stack, key: str = "plain", **kwargs: Any) -> httpx.Client:
    return stack.client(headers={"Authorization": f"Bearer {KEYS[key]}"}, **kwargs)


def jobs_of(stack: Stack, key: str) -> int:
    from models.api_key import owner_of

    engine = sql_engine_for(stack.extra["db"])
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM jobs WHERE owner = :o"),
                                          {"o": owner_of(KEYS[key])}).scalar_one())
    finally:
        engine.dispose()


BODY = {"input": "Hello there.", "voice": "joe"}


@pytest.mark.parametrize(("body", "param", "words"), [
    (BODY | {"metadata": {"n": 10**30}}, "metadata.n", "64-bit"),
    (BODY | {"seed": 10**30}, "seed", "64-bit"),
    (BODY | {"metadata": {"k\u0000": "v"}}, "metadata", "NUL"),
    (BODY | {"metadata": {"k": "v\u0000"}}, "metadata.k", "NUL"),
    (BODY | {"chapters": [{"title": "A\u0000", "input": "Hi."}], "input": None}, None, "NUL"),
    (BODY | {"book": {"title": "T\u0000"}}, "book.title", "NUL"),
    (BODY | {"metadata": {f"k{n}": n for n in range(17)}}, "metadata", "at most 16 keys"),
    (BODY | {"metadata": {"k": "v" * 513}}, "metadata", "512"),
    (BODY | {"metadata": {"k": {"nested": 1}}}, "metadata", "string, a number"),
])
def test_values_a_database_refuses_are_a_400_naming_the_field(
        api: Stack, body: dict[str, Any], param: str | None, words: str) -> None:
    before = jobs_of(api, "plain")
    with client(api) as http:
        response = http.post("/v1/audio/jobs", json={k: v for k, v in body.items()
                                                     if v is not None})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert words in error["message"]
    if param:
        assert error["param"] == param
    assert jobs_of(api, "plain") == before


@pytest.mark.parametrize("raw", ['{"input": "Hi.", "metadata": {"n": 1e400}}',
                                 '{"input": "Hi.", "metadata": {"n": Infinity}}',
                                 '{"input": "Hi.", "speed": NaN}'])
def test_non_finite_numbers_are_a_400(api: Stack, raw: str) -> None:
    with client(api) as http:
        response = http.post("/v1/audio/jobs", content=raw,
                             headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert "finite" in error_of(response)["message"]


def _raw(stack: Stack, head: bytes, body: Iterator[bytes] | None = None) -> bytes:
    """Send a request head, then `body` from a thread while the answer is read here; return
    the answer's first bytes (the server may answer, and close, before the body is sent)."""
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head)

        def send() -> None:
            with contextlib.suppress(OSError):
                for chunk in body or ():
                    sock.sendall(chunk)

        threading.Thread(target=send, daemon=True).start()
        answer = b""
        while b"\r\n\r\n" not in answer or b"}}" not in answer:  # the head, then the body
            piece = sock.recv(4096)
            if not piece:
                break
            answer += piece
        return answer


def _head(path: str, key: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {KEYS[key]}",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("path", ["/v1/audio/jobs", "/v1/audio/speech", "/v1/audio/jobs/preview",
                                  "/v1/audio/lexicons", "/v1/audio/jobs/batch",
                                  "/v1/audio/voices", "/v1/audio/voice_consents"])
def test_a_body_declared_over_max_body_bytes_is_a_413_before_it_is_read(
        api: Stack, path: str) -> None:
    answer = _raw(api, _head(path, "plain", Content_Type="application/json",
                             Content_Length=str(33 * 1024 * 1024)))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"body_too_large" in answer


def test_a_chunked_body_is_cut_off_as_it_streams(api: Stack) -> None:
    megabyte = b"a" * (1024 * 1024)
    chunk = f"{len(megabyte):x}\r\n".encode() + megabyte + b"\r\n"
    answer = _raw(api, _head("/v1/audio/jobs", "plain", Content_Type="application/json",
                             Transfer_Encoding="chunked"), iter([chunk] * 64))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]  # no length given: counted
    assert b"body_too_large" in answer


def test_a_multipart_upload_over_the_limit_is_cut_off_as_it_streams(api: Stack) -> None:
    boundary = "b0undary"
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.epub\""
            f"\r\nContent-Type: application/epub+zip\r\n\r\n").encode()
    megabyte = b"\0" * (1024 * 1024)
    body = iter([f"{len(part):x}\r\n".encode() + part + b"\r\n",
                 *[f"{len(megabyte):x}\r\n".encode() + megabyte + b"\r\n"] * 64])
    answer = _raw(api, _head("/v1/audio/jobs", "plain", Transfer_Encoding="chunked",
                             Content_Type=f"multipart/form-data; boundary={boundary}"), body)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"body_too_large" in answer


def test_json_sent_as_text_plain_is_a_415_and_cross_site_posts_a_403(api: Stack) -> None:
    before = jobs_of(api, "plain")
    with client(api) as http:
        plain = http.post("/v1/audio/jobs", content=json.dumps(BODY),
                          headers={"content-type": "text/plain"})
        assert plain.status_code == 415, plain.text
        for headers in ({"sec-fetch-site": "cross-site"}, {"origin": "https://evil.example"}):
            response = http.post("/v1/audio/jobs", json=BODY, headers=headers)
            assert response.status_code == 403, response.text
            assert error_of(response)["code"] == "cross_site_request"
        same = http.post("/v1/audio/jobs/preview", json=BODY,
                         headers={"sec-fetch-site": "same-origin"})
        assert same.status_code != 403, same.text
    assert jobs_of(api, "plain") == before


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(api: Stack) -> None:
    if api.extra["kind"] != "sqlite":
        pytest.skip("the HTTP protocol's deadline: once is enough")
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        closed = False
        while not closed and time.monotonic() - started < 25:
            try:
                sock.sendall(b"X-Slow: y\r\n")
                closed = sock.recv(1, socket.MSG_DONTWAIT) == b""  # b"": the server closed
            except BlockingIOError:  # nothing to read yet: the connection is still open
                closed = False
            except OSError:  # reset by the server
                closed = True
            time.sleep(0 if closed else 1)
        assert closed, "the connection was still open after 25 s of a request head"
        assert time.monotonic() - started < 15  # REQUEST_HEADER_SECONDS is 10


def test_a_body_that_trickles_is_a_408_after_its_deadline(api: Stack) -> None:
    if api.extra["kind"] != "sqlite":
        pytest.skip("the body's deadline (120 s by default): once is enough")
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=200) as sock:
        sock.sendall(b"POST /v1/audio/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100000\r\nAuthorization: Bearer "
                     + KEYS["plain"].encode() + b"\r\n\r\n{")
        started = time.monotonic()
        sock.settimeout(1)
        answer = b""
        while time.monotonic() - started < 150 and not answer:
            try:
                sock.sendall(b" ")
                answer = sock.recv(4096)
            except TimeoutError:
                continue
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert 115 < time.monotonic() - started < 140  # REQUEST_BODY_SECONDS is 120


def test_ten_submits_at_once_under_a_cap_of_three_active_jobs_make_three(
        capped: Stack) -> None:
    with client(capped, "active") as http, ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: http.post("/v1/audio/jobs", json=BODY).status_code,
                              range(10)))
    assert sorted(codes) == [202] * 3 + [429] * 7, codes
    assert jobs_of(capped, "active") == 3


def test_a_burst_cannot_overdraw_the_daily_character_quota(capped: Stack) -> None:
    body = BODY | {"input": "a" * 249 + "."}  # 250 characters; the quota is 600
    with client(capped, "quota") as http, ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda _: http.post("/v1/audio/jobs/batch", json={
            "jobs": [body]}).status_code, range(16)))
    assert sorted(codes) == [202] * 2 + [429] * 14, codes
    assert jobs_of(capped, "quota") == 2


def test_thirty_submits_at_once_never_take_the_pool_and_another_key_is_served(
        api: Stack) -> None:
    """A submit with an Idempotency-Key once held its session's connection (the key's
    lookup) while it took a second for the INSERT: 30 at once took every connection and
    waited for one (30 of them a 500 after 30 s on SQLite)."""
    before = jobs_of(api, "plain")
    with client(api) as http, client(api, "other") as other, \
            ThreadPoolExecutor(31) as pool:
        submits = [pool.submit(http.post, "/v1/audio/jobs", json=BODY,
                               headers={"Idempotency-Key": f"pool-{uuid.uuid4().hex}"})
                   for _ in range(30)]
        time.sleep(0.2)
        started = time.monotonic()
        read = other.get("/v1/audio/jobs")
        waited = time.monotonic() - started
        codes = [f.result().status_code for f in submits]
    assert read.status_code == 200
    assert codes == [202] * 30, codes
    assert waited < 5, waited
    assert jobs_of(api, "plain") == before + 30


def test_wrong_keys_are_limited_per_address(api: Stack) -> None:
    with api.client(headers={"Authorization": "Bearer nk_wrong"}) as wrong:
        codes: list[int] = []
        while 429 not in codes and len(codes) < 62:  # 30 a minute: within two windows
            codes.append(wrong.get("/v1/audio/jobs").status_code)
    assert codes[-1] == 429, codes
    assert set(codes[:-1]) == {401}
    with client(api) as http:  # a key of the settings still gets through
        assert http.get("/v1/audio/jobs").status_code == 200


def test_metrics_need_a_key_when_the_api_has_keys(api: Stack) -> None:
    with api.client() as anonymous:
        assert anonymous.get("/metrics").status_code in (401, 429)
    with client(api) as http:
        response = http.get("/metrics")
        assert response.status_code == 200
        assert "narrator_jobs" in response.text


def test_the_data_folder_and_database_are_their_owners_only(api: Stack) -> None:
    if api.extra["kind"] != "sqlite":
        pytest.skip("the SQLite file exists only in embedded mode")
    database = Path(api.extra["db"].removeprefix("sqlite:///"))
    for path in (api.extra["data"], database):
        assert path.stat().st_mode & 0o077 == 0, (path, oct(path.stat().st_mode))
