"""Engine and session factories for workers (sync) and the API (async)."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy
import sqlalchemy.ext.asyncio
from sqlalchemy import Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlalchemy.orm import Session, sessionmaker

from models.settings import DatabaseSettings, get_settings


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the API read while the worker writes; busy_timeout makes writers queue.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _engine_args(settings: DatabaseSettings) -> dict[str, Any]:
    if settings.is_sqlite:
        private_data_dir(settings.data_dir)
        database = settings.url().removeprefix("sqlite:///")
        if database.endswith(".db") and not Path(database).exists():
            # Created here, readable by its owner only (SQLite gives its WAL the same mode).
            os.close(os.open(database, os.O_CREAT | os.O_WRONLY, 0o600))
        return {}
    return {"pool_size": settings.database_pool_size, "max_overflow": 0, "pool_pre_ping": True}


def private_data_dir(folder: Path) -> None:
    """Create DATA_DIR readable by its owner only (jobs' text, media, the SQLite file); an
    existing folder keeps the mode it has."""
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)


def sql_engine(settings: DatabaseSettings | None = None) -> Engine:
    """Create the database's synchronous SQLAlchemy engine (workers, migrations, CLI).

    "sql" in these names, because a worker's "engine" is its speech engine.
    """
    settings = settings or get_settings()
    # Looked up at each call, not imported by name: tracing (core.tracing) wraps it.
    engine = sqlalchemy.create_engine(settings.url(), **_engine_args(settings))
    if settings.is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def sql_engine_for(url: str, **options: Any) -> Engine:
    """Create a synchronous SQLAlchemy engine for a database URL of any scheme (tools, tests)."""
    return sqlalchemy.create_engine(DatabaseSettings(database_url=url).url(), **options)


def async_sql_engine(settings: DatabaseSettings | None = None) -> AsyncEngine:
    """Create the database's asynchronous SQLAlchemy engine (API).

    No pre-ping (a round trip on every checkout): after a database restart, the request
    that meets a dead connection gets a 503 and SQLAlchemy drops the whole pool.
    """
    settings = settings or get_settings()
    engine = sqlalchemy.ext.asyncio.create_async_engine(
        settings.url(asynchronous=True), **_engine_args(settings) | {"pool_pre_ping": False})
    if settings.is_sqlite:
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


_BUILDING = threading.Lock()
_sessions: sessionmaker[Session] | None = None


def sync_sessionmaker() -> sessionmaker[Session]:
    """Return the process-wide sessionmaker for workers.

    Built once under a lock: threads that ask at once would otherwise each open a pool.
    """
    global _sessions
    with _BUILDING:
        if _sessions is None:
            _sessions = sessionmaker(sql_engine(), expire_on_commit=False)
        return _sessions


def reset_sessionmaker() -> None:
    """Close the process-wide pool; the next session opens a new one (tests)."""
    global _sessions
    with _BUILDING:
        if _sessions is not None:
            _sessions.kw["bind"].dispose()
        _sessions = None


def async_session_factory(engine: AsyncEngine) -> async_sessionmaker[Any]:
    """Return a sessionmaker bound to an async engine."""
    return async_sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """Open a session that commits on success and rolls back on error: the task boundary."""
    with sync_sessionmaker()() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def sqlite_path(settings: DatabaseSettings) -> Path | None:
    """Return the SQLite file path, or None on Postgres."""
    url = settings.url()
    return Path(url.split(":///", 1)[1]) if url.startswith("sqlite") else None
