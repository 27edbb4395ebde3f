"""Faults injected into real processes: no job lost, no finished segment synthesised twice.

Each test counts from the manifest's per-segment `attempts`: a segment runs again only if
its worker died while running it.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from models.db import sql_engine_for
from tests.conftest import S3_BUCKET, S3Server, base_env, fresh_database
from tests.support import (
    PIPER_IN_FLIGHT,
    Process,
    Stack,
    free_port,
    narrator,
    start_stack,
    wait_for,
    wait_job,
    wait_segments,
)

PARAGRAPH = ("The tide came in over the flats before anyone had noticed, and the birds rose "
             "together from the water in one long grey sheet. ") * 3
BOOK = {"input": "\n\n".join([PARAGRAPH] * 12), "response_format": "wav"}
# Stale after 8 s: a Piper segment takes 1-2 s, but on a loaded 2-core machine one over 4 s
# was taken for lost and run twice while its worker was still alive.
FAST_REAPER = {"NARRATOR_SEGMENT_STALE_SECONDS": "8", "NARRATOR_REAPER_INTERVAL_SECONDS": "1",
               "NARRATOR_RETRY_BACKOFF_SECONDS": "0.5"}


def _done(http: httpx.Client, job_id: str) -> int:
    return int(http.get(f"/v1/audio/jobs/{job_id}").json()["segments"]["done"])


def _restart_worker(stack: Stack, name: str) -> None:
    worker = Process(narrator("worker"), stack.env, stack.worker.log.with_name(name)).start()
    stack.worker = worker
    wait_for(lambda: "engine.ready" in worker.output(), 60, "the restarted worker")


def _attempts(http: httpx.Client, job: dict[str, Any]) -> list[int]:
    manifest = http.get(job["result"]["manifest_url"]).json()
    return [s["attempts"] for s in manifest["segments"]]


@pytest.fixture
def database_url() -> Iterator[str]:
    """Each fault test on a database of its own: its fast reaper sees only its jobs."""
    with fresh_database() as url:
        yield url


@pytest.fixture
def stack(tmp_path: Path, database_url: str) -> Iterator[Stack]:
    import redis

    from tests.conftest import redis_url

    redis.Redis.from_url(redis_url(9)).flushdb()
    env = base_env(tmp_path, database_url, 9) | FAST_REAPER
    started = start_stack(tmp_path, env)
    yield started
    started.stop()


def test_worker_sigkilled_three_times_in_one_job(stack: Stack) -> None:
    with stack.client() as http:
        job = http.post("/v1/audio/jobs", json=BOOK).json()
        for kill in range(3):
            before = _done(http, job["id"])  # progress since the last restart:
            wait_segments(http, job["id"], before + 1, what=f"progress before kill {kill + 1}")
            stack.worker.stop(signal.SIGKILL)
            assert http.get(f"/v1/audio/jobs/{job['id']}").json()["status"] == "in_progress"
            _restart_worker(stack, f"worker-{kill + 2}.log")
        done = wait_job(http, job["id"], timeout=240)
        assert done["status"] == "completed", done
        attempts = _attempts(http, done)
    assert len(attempts) == 12  # nothing lost
    assert max(attempts) <= 4  # a segment in flight at every kill at worst
    # At most the segments in flight (one per pool thread), per kill.
    assert sum(a - 1 for a in attempts) <= 3 * PIPER_IN_FLIGHT


def test_worker_killed_mid_dispatch_loses_nothing(tmp_path: Path, database_url: str) -> None:
    """Dispatch marks segments in the database, then sends their messages. A worker killed
    in between leaves segments marked dispatched with no message: here it is killed once
    the job is planned and its messages are deleted, which is that state. With the
    default reaper settings, the next worker sends them again: nothing lost, none run
    twice that was not running."""
    import redis

    from tests.conftest import redis_url

    redis.Redis.from_url(redis_url(9)).flushdb()
    stack = start_stack(tmp_path, base_env(tmp_path, database_url, 9))
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_for(lambda: _rows(database_url, "SELECT count(*) FROM segments WHERE "
                                   "dispatched_at IS NOT NULL")[0][0] > 0, 60, "dispatch",
                     interval=0.01)
            stack.worker.stop(signal.SIGKILL)
            # The dispatched segments' messages, on the queue or taken by the killed
            # worker (Redis would give those back after its 6-hour visibility timeout): lost.
            broker = redis.Redis.from_url(redis_url(9))
            broker.delete(*broker.keys("batch.piper*"), "unacked", "unacked_index")
            [(dispatched,)] = _rows(database_url, "SELECT count(*) FROM segments WHERE "
                                    "status = 'pending' AND dispatched_at IS NOT NULL")
            _restart_worker(stack, "worker-2.log")
            done = wait_job(http, job["id"], timeout=240)
            assert done["status"] == "completed", done
            attempts = _attempts(http, done)
    finally:
        stack.stop()
    assert dispatched > 0
    assert len(attempts) == 12
    assert max(attempts) <= 2  # only the segments running at the kill ran again


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A private Redis (append-only, fsync always) that the test may stop and start."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs the redis-server program to restart Redis")
    port, data = free_port(), tmp_path / "redis"
    data.mkdir()
    yield port, data
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True,
                   check=False)


def _rows(database_url: str, query: str) -> list[tuple[Any, ...]]:
    from sqlalchemy import text

    engine = sql_engine_for(database_url)
    try:
        with engine.connect() as db:
            return [tuple(row) for row in db.execute(text(query))]
    finally:
        engine.dispose()


def _segments(database_url: str) -> str:
    """The segments' rows, one a line (for a failure's message)."""
    return "\n".join(map(str, _rows(database_url, "SELECT index, status, worker, attempts, "
                                     "dispatched_at, heartbeat_at FROM segments ORDER BY index")))


def _start_redis(port: int, data: Path) -> None:
    subprocess.run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--daemonize",
                    "yes", "--dir", str(data), "--appendonly", "yes", "--appendfsync", "always",
                    "--save", ""], check=True, capture_output=True)
    wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"],
                                    capture_output=True, text=True).stdout.strip() == "PONG",
             10, "Redis")


def test_redis_restarted_mid_job(tmp_path: Path, database_url: str,
                                 own_redis: tuple[int, Path]) -> None:
    port, data = own_redis
    _start_redis(port, data)
    env = base_env(tmp_path, database_url, 0) | FAST_REAPER | {
        "NARRATOR_BROKER_URL": f"redis://127.0.0.1:{port}/0"}
    stack = start_stack(tmp_path / "stack", env)
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 2, what="progress before the restart")
            subprocess.run(["redis-cli", "-p", str(port), "shutdown"], capture_output=True,
                           check=False)  # saves nothing more: the AOF already has it all
            time.sleep(2)
            _start_redis(port, data)
            try:
                done = wait_job(http, job["id"], timeout=240)
            except AssertionError as exc:  # what the worker and the segments said
                raise AssertionError(f"{exc}\n{_segments(database_url)}\n"
                                     f"{stack.worker.output()[-6000:]}") from exc
            assert done["status"] == "completed", (done, stack.worker.output()[-3000:])
            attempts = _attempts(http, done)
    finally:
        stack.stop()
    assert len(attempts) == 12
    assert max(attempts) <= 2


def test_a_worker_restarts_itself_after_celerys_unrecoverable_error(
        tmp_path: Path, database_url: str) -> None:
    """Celery stops its worker on an error of its own (kombu's race on a Redis restart, seen
    in CI); the worker's process then stayed up consuming nothing. It restarts itself now,
    default settings, no supervisor: the same pid, a fresh image, and the job completes."""
    env = base_env(tmp_path, database_url, 0)
    redis_client = redis.Redis.from_url(env["NARRATOR_BROKER_URL"])
    redis_client.flushdb()
    stack = start_stack(tmp_path / "stack", env, worker=False)
    stack.worker = Process([sys.executable, "-P", str(Path(__file__).with_name(
        "celery_error_worker.py")), "worker"], env, tmp_path / "stack" / "worker.log").start()
    worker = stack.worker
    try:
        wait_for(lambda: "engine.ready" in worker.output(), 60, "the worker")
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 2, what="progress before the error")
            assert worker.popen is not None
            worker.popen.send_signal(signal.SIGUSR2)
            wait_for(lambda: worker.output().count("engine.ready") == 2, 90,
                     f"the worker's fresh image\n{worker.output()[-3000:]}")
            done = wait_job(http, job["id"], timeout=120)
            attempts = _attempts(http, done)
        assert worker.popen.poll() is None  # the same process, exec'ed
        worker.stop(signal.SIGINT)  # Ctrl-C stops Celery with a failing status too: no restart
        assert worker.popen.poll() is not None
    finally:
        stack.stop()
    output = worker.output()
    assert output.count("engine.ready") == 2
    assert "Unrecoverable error: AttributeError" in output
    assert "worker.celery_failed" in output
    assert done["status"] == "completed", (done, output[-3000:])
    assert len(attempts) == 12
    assert max(attempts) <= 2


def test_s3_down_for_a_few_seconds_mid_job(tmp_path: Path, database_url: str,
                                           s3_server: S3Server) -> None:
    env = base_env(tmp_path, database_url, 8) | FAST_REAPER | s3_server.stack_env() | {
        "NARRATOR_SEGMENT_MAX_ATTEMPTS": "6"}  # backoff 1 + 2 + 4 + 8 + 16 s
    stack = start_stack(tmp_path / "stack", env)
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 2, what="progress before the outage")
            s3_server.stop()
            time.sleep(4)
            s3_server.start()
            done = wait_job(http, job["id"], timeout=240)
            assert done["status"] == "completed", (done, stack.worker.output()[-3000:])
            attempts = _attempts(http, done)
            audio = httpx.get(done["result"]["url"])
    finally:
        stack.stop()
    assert len(attempts) == 12  # every segment, in order, in the result
    assert audio.status_code == 200
    assert len(audio.content) == done["result"]["bytes"]


def test_s3_down_for_good_fails_the_job_and_never_completes_it(
        tmp_path: Path, database_url: str, s3_server: S3Server) -> None:
    env = base_env(tmp_path, database_url, 8) | FAST_REAPER | s3_server.stack_env() | {
        "NARRATOR_SEGMENT_MAX_ATTEMPTS": "2",  # the task's own retries, not the reaper's:
        "NARRATOR_SEGMENT_STALE_SECONDS": "120"}  # the worker is alive, storage is not
    stack = start_stack(tmp_path / "stack", env)
    try:
        with stack.client() as http:
            s3_server.stop()
            job = http.post("/v1/audio/jobs", json={"input": "Nowhere to put this."}).json()
            failed = wait_job(http, job["id"], timeout=120)
    finally:
        stack.stop()
    assert failed["status"] == "failed", failed
    assert failed["result"] is None
    assert failed["error"]["code"] == "segment_failed"
    assert "failed 2 times" in failed["error"]["message"]


def test_s3_gone_at_assembly_fails_the_job_after_its_retries(
        tmp_path: Path, database_url: str, s3_server: S3Server) -> None:
    """Parts go to local media, the result to an S3 output_url that is down: every segment
    is done, assembly retries with backoff, then the job fails; nothing is completed."""
    env = base_env(tmp_path, database_url, 8) | FAST_REAPER | s3_server.stack_env() | {
        "NARRATOR_STORAGE_URL": "",  # parts and the default store: the local media folder
        "NARRATOR_OUTPUT_URL_PREFIXES": f"s3://{S3_BUCKET}/out/",
        "NARRATOR_ASSEMBLY_MAX_ATTEMPTS": "3", "NARRATOR_SEGMENT_STALE_SECONDS": "120"}
    stack = start_stack(tmp_path / "stack", env)
    try:
        with stack.client() as http:
            s3_server.stop()
            job = http.post("/v1/audio/jobs", json={
                "input": "Done, but nowhere to deliver.",
                "output_url": f"s3://{S3_BUCKET}/out/gone"}).json()
            failed = wait_job(http, job["id"], timeout=120)
    finally:
        stack.stop()
    assert failed["status"] == "failed", failed
    assert failed["result"] is None
    assert failed["segments"]["done"] == failed["segments"]["total"]
    assert failed["error"]["code"] == "assembly_failed"
    assert "unreachable 3 times" in failed["error"]["message"]


@pytest.fixture
def own_postgres() -> Iterator[tuple[str, list[str]]]:
    """A private Postgres cluster (as the postgres user) that the test may restart."""
    bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    runuser = shutil.which("runuser")
    if not bindirs or runuser is None or os.geteuid() != 0:
        pytest.skip("needs Debian's postgresql binaries and root, to run a private cluster")
    bindir = bindirs[-1].parent
    data = Path(tempfile.mkdtemp(prefix="narrator-pg-"))
    shutil.chown(data, "postgres", "postgres")
    as_postgres = [runuser, "-u", "postgres", "--"]
    subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                    "-A", "trust"], check=True, capture_output=True)
    port = free_port()
    ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "log"),
           "-w", "-o", f"-p {port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off"]
    subprocess.run([*ctl, "start"], check=True, capture_output=True)
    yield f"postgresql://postgres@127.0.0.1:{port}/postgres", ctl
    subprocess.run([*ctl, "-m", "immediate", "stop"], capture_output=True, check=False)
    shutil.rmtree(data, ignore_errors=True)


def test_postgres_restarted_mid_job(tmp_path: Path,
                                    own_postgres: tuple[str, list[str]]) -> None:
    from migrations import upgrade

    url, ctl = own_postgres
    upgrade(url)
    env = base_env(tmp_path, url, 7) | FAST_REAPER
    stack = start_stack(tmp_path / "stack", env)
    try:
        with stack.client() as http:
            job = http.post("/v1/audio/jobs", json=BOOK).json()
            wait_segments(http, job["id"], 2, what="progress before the restart")
            subprocess.run([*ctl, "-m", "fast", "stop"], check=True, capture_output=True)
            down = http.get(f"/v1/audio/jobs/{job['id']}")
            assert down.status_code == 503  # not a 500
            assert "retry-after" in down.headers
            time.sleep(3)
            subprocess.run([*ctl, "start"], check=True, capture_output=True)
            done = wait_job(http, job["id"], timeout=240)
            assert done["status"] == "completed", (done, stack.worker.output()[-3000:])
            attempts = _attempts(http, done)
    finally:
        stack.stop()
    assert len(attempts) == 12
    assert max(attempts) <= 2
