"""Storage settings."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class StorageSettings(BaseSettings):
    """Storage: where media goes, a local folder or S3, and the URLs it is delivered as."""

    # As models.settings.CONFIG (storage/ imports nothing of models/).
    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore",
                                      use_attribute_docstrings=True)

    data_dir: Path = Path("./narrator-data")
    """Folder of the embedded mode's state: the SQLite database, the filesystem broker, and
    media when STORAGE_URL is empty."""
    storage_url: str = ""
    """Where media is written: a folder, or `s3://bucket/prefix`; empty: DATA_DIR/media."""
    public_base_url: str = ""
    """Media URLs become `{base}/{key}` (a CDN or a public bucket); empty: presigned S3 URLs,
    or the API's own content URLs for a folder."""
    s3_endpoint_url: str = ""
    """The S3 server (MinIO, SeaweedFS); empty: AWS."""
    s3_region: str = "us-east-1"
    """The S3 region."""
    s3_access_key_id: str = ""
    """S3 credentials; empty: the AWS credential chain (environment, profile, instance role)."""
    s3_secret_access_key: str = ""
    """S3 credentials, with S3_ACCESS_KEY_ID."""
    presign_expires_seconds: int = 3600
    """Lifetime of presigned (SigV4) media URLs."""

    @property
    def media_url(self) -> str:
        """Return the storage root URL."""
        return self.storage_url or str((self.data_dir / "media").resolve())


@lru_cache
def get_settings() -> StorageSettings:
    """Return the process-wide storage settings."""
    return StorageSettings()
