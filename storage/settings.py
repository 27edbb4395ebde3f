"""Storage settings."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class StorageSettings(BaseSettings):
    """Where media goes: a local folder (default) or s3://bucket/prefix."""

    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore")

    data_dir: Path = Path("./narrator-data")
    storage_url: str = ""
    public_base_url: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = "us-east-1"
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    presign_expires_seconds: int = 3600

    @property
    def media_url(self) -> str:
        """Return the storage root URL."""
        return self.storage_url or str((self.data_dir / "media").resolve())


@lru_cache
def get_settings() -> StorageSettings:
    """Return the process-wide storage settings."""
    return StorageSettings()
