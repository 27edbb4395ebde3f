"""Database settings."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

# Every settings class: variables prefixed NARRATOR_, unknown ones ignored, and each field's
# description the docstring under it (the configuration reference is generated from them).
CONFIG = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore",
                            use_attribute_docstrings=True)


class DatabaseSettings(BaseSettings):
    """Database: where the job table lives, Postgres in production, SQLite when embedded."""

    model_config = CONFIG

    data_dir: Path = Path("./narrator-data")
    """Folder of the embedded mode's state: the SQLite database, the filesystem broker, and
    media when STORAGE_URL is empty."""
    database_url: str = ""
    """SQLAlchemy URL of the job table (`postgresql://user:pass@host/db`); empty: SQLite in
    DATA_DIR. Any Postgres scheme works: the API uses asyncpg, workers and migrations psycopg."""
    database_pool_size: int = 20
    """Connections each process keeps open. No overflow: a connection opened for a burst and
    closed after it costs Postgres a backend start each time (bench.submit)."""

    def url(self, *, asynchronous: bool = False) -> str:
        """Return the SQLAlchemy URL with the driver this process uses."""
        url = self.database_url or f"sqlite:///{(self.data_dir / 'narrator.db').resolve()}"
        scheme, sep, rest = url.partition("://")
        if scheme in ("postgres", "postgresql", "postgresql+psycopg", "postgresql+asyncpg"):
            # The API's async engine uses asyncpg: a third of psycopg's CPU per query
            # (bench.poll); workers and migrations stay on psycopg.
            scheme = "postgresql+asyncpg" if asynchronous else "postgresql+psycopg"
        elif scheme.startswith("sqlite"):
            scheme = "sqlite+aiosqlite" if asynchronous else "sqlite"
        return f"{scheme}{sep}{rest}"

    @property
    def is_sqlite(self) -> bool:
        """Say whether the database is the embedded SQLite file."""
        return self.url().startswith("sqlite")


@lru_cache
def get_settings() -> DatabaseSettings:
    """Return the process-wide database settings."""
    return DatabaseSettings()
