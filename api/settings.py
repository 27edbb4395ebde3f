"""API settings."""

from functools import lru_cache

from core.settings import CoreSettings


class ApiSettings(CoreSettings):
    """Limits and access for the HTTP API."""

    api_keys: str = ""
    sync_max_chars: int = 4096
    job_max_chars: int = 2_000_000
    max_chapters: int = 1000
    max_body_bytes: int = 32 * 1024 * 1024  # every route (api/body.py)
    request_header_seconds: float = 10.0  # a request's head must arrive within this
    request_body_seconds: float = 120.0  # its body within this of the first read (408)
    # Where jobs may deliver with `output_url`: comma-separated s3://bucket/prefix/ entries.
    output_url_prefixes: str = ""
    # Per key (0: off): requests per minute, jobs queued or running, job characters per 24 h.
    rate_limit_per_minute: int = 0
    # Wrong or missing keys per client address per minute, then a 429 for that address (a
    # key is never guessed, but every try costs a lookup); 0: no limit.
    failed_auth_per_minute: int = 30
    # A bearer token for /metrics when the API has keys (Prometheus' `authorization`); with
    # keys and no token, /metrics takes any valid key. Without keys it is open.
    metrics_token: str = ""
    max_active_jobs_per_key: int = 0
    max_chars_per_day_per_key: int = 0

    @property
    def output_prefixes(self) -> list[str]:
        """Return the allowed output URL prefixes, each ending in '/'."""
        return [p.strip().rstrip("/") + "/" for p in self.output_url_prefixes.split(",")
                if p.strip()]

    @property
    def keys(self) -> set[str]:
        """Return the configured API keys (empty: the API is open)."""
        return {k.strip() for k in self.api_keys.split(",") if k.strip()}


@lru_cache
def get_settings() -> ApiSettings:
    """Return the process-wide API settings."""
    return ApiSettings()
