"""Database settings."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """Where the job table lives: Postgres in production, SQLite under DATA_DIR when embedded."""

    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore")

    data_dir: Path = Path("./narrator-data")
    database_url: str = ""
    database_pool_size: int = 10

    def url(self, *, asynchronous: bool = False) -> str:
        """Return the SQLAlchemy URL with the driver this process uses."""
        url = self.database_url or f"sqlite:///{(self.data_dir / 'narrator.db').resolve()}"
        scheme, sep, rest = url.partition("://")
        if scheme in ("postgres", "postgresql", "postgresql+psycopg", "postgresql+asyncpg"):
            scheme = "postgresql+psycopg"
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
