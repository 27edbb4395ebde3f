"""The one settings base: what every Narrator process reads (prefix NARRATOR_).

The database's and storage's own settings (models/, storage/: they import nothing above
them) are merged in, so each variable has one default; the API's and the workers' settings
extend this class with what only they read.
"""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic_settings import SettingsConfigDict

from models.settings import DatabaseSettings
from storage.settings import StorageSettings


class CoreSettings(DatabaseSettings, StorageSettings):
    """Broker, engine and model, and the URLs and limits both sides of a job share."""

    model_config = SettingsConfigDict(env_prefix="NARRATOR_", extra="ignore")

    # How a job's text is planned into segments: the planner on a worker, and the API when a
    # re-render changes a chapter's text.
    segment_chars: int = 400
    sentence_gap_seconds: float = 0.25
    paragraph_gap_seconds: float = 0.6
    chapter_gap_seconds: float = 1.5
    broker_url: str = ""
    broker_poll_seconds: float = 0.01
    engine: str = "piper"
    model: str = ""
    # The forced aligner of the workers that run `narrator.align_segment` (workers/settings.py
    # has its own settings): the API accepts `words` subtitles in the languages it covers
    # (core.catalog.ALIGNER_LANGUAGES). Set it the same for the API and the workers.
    aligner: Literal["pocketsphinx", "qwen3"] = "pocketsphinx"
    # The recogniser of the recognition check (`verify`): the API accepts `verify` in the
    # languages it hears (core.catalog.RECOGNIZER_LANGUAGES). The same for API and workers.
    recognizer: Literal["pocketsphinx", "qwen3"] = "pocketsphinx"
    # Base of API URLs: the API uses the request's own base URL when empty; webhook payloads
    # (sent by workers) use http://127.0.0.1:8000 then.
    public_api_url: str = ""
    # Private networks or hosts that webhooks may call anyway (comma-separated CIDRs, names).
    outbound_allow: str = ""
    sync_timeout_seconds: float = 120.0  # a sync request waits this long for a worker
    # A worker speaking a sync request sends a keepalive frame this often; the API answers
    # 503 once the worker that took a request has been silent for SYNC_SILENCE_SECONDS
    # (it died, or lost the broker), instead of waiting out SYNC_TIMEOUT_SECONDS.
    sync_keepalive_seconds: float = 1.0
    sync_silence_seconds: float = 5.0
    webhook_secret: str = ""

    @property
    def embedded_broker(self) -> bool:
        """Say whether the broker is the embedded filesystem transport."""
        return not self.broker_url or self.broker_url.startswith("filesystem")

    @property
    def broker_dir(self) -> Path:
        """Return the embedded broker's folder."""
        return (self.data_dir / "broker").resolve()

    @property
    def channel_dir(self) -> Path:
        """Return the embedded result channels' folder."""
        return (self.data_dir / "channels").resolve()

    @property
    def api_url(self) -> str:
        """Return the API's base URL for links made outside a request (webhook payloads)."""
        return (self.public_api_url or "http://127.0.0.1:8000").rstrip("/")


@lru_cache
def get_settings() -> CoreSettings:
    """Return the process-wide core settings."""
    return CoreSettings()
