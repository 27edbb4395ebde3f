"""Database settings."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """Where the job table lives: Postgres in production, SQLite under DATA_DIR when embedded."""

    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore")

    data_dir: Path = Path("./narrator-data")
    database_url: str = ""
    # Connections each process keeps open. No overflow: a connection opened for a burst and
    # closed after it costs Postgres a backend start each time (bench.submit).
    database_pool_size: int = 20

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
