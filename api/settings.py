"""API settings: the core groups plus access and limits, which only the API reads."""

from functools import lru_cache

from pydantic_settings import BaseSettings

from core.settings import CoreSettings
from models.settings import CONFIG


class AccessSettings(BaseSettings):
    """API access: keys, and who may read /metrics."""

    model_config = CONFIG

    api_keys: str = ""
    """Comma-separated keys for simple setups; clients send `Authorization: Bearer <key>`,
    and jobs are visible only to their key. Keys can also live in the database, stored as
    SHA-256 only: `narrator keys create --name NAME [--weight N] [--priorities
    high,normal,low]` (prints the key once), `narrator keys list`, `narrator keys set ID
    --weight N --priorities ...`, `narrator keys revoke ID` (each takes effect within 5 s). A
    stored key's weight is its share of the engines against other keys' (see Concepts,
    Scheduling); its priorities replace `NARRATOR_JOB_PRIORITIES` for it. With no key in
    either place the API is open."""
    failed_auth_per_minute: int = 30
    """Wrong or missing keys per client address per minute, then a 429 for that address (a
    key is never guessed, but every try costs a lookup; a key of API_KEYS still gets
    through); 0: no limit."""
    metrics_token: str = ""
    """A bearer token for `/metrics` when the API has keys (Prometheus' `authorization`
    block); with keys and no token, `/metrics` takes any valid key. Without keys it is open."""


class LimitSettings(BaseSettings):
    """API limits: the largest input each route accepts, and how long a request may take to
    arrive. Past them a request gets a 4xx before any work is done."""

    model_config = CONFIG

    sync_max_chars: int = 4096
    """Longest sync input; longer gets a 400 pointing at `/v1/audio/jobs`."""
    job_max_chars: int = 2_000_000
    """Longest job input (all chapters together)."""
    max_chapters: int = 1000
    """Most chapters per job."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest request body on every route (JSON, batches, EPUB and voice uploads): a 413
    before the body is read when `Content-Length` says so, else as soon as the bytes counted
    pass it."""
    request_header_seconds: float = 10.0
    """A request's head must arrive within this; otherwise the connection is closed."""
    request_body_seconds: float = 120.0
    """A request's body must arrive within this of its first read; otherwise a 408."""
    live_max_chars: int = 100_000
    """Most characters of text one `WS /v1/audio/speech/stream` session takes; past it the
    session ends (close 1008, `input_too_long`)."""
    live_idle_seconds: float = 60.0
    """A streaming session that sends no message for this long ends (close 1008)."""
    live_session_seconds: float = 3600.0
    """Longest streaming session; then it ends (close 1008) and the client opens another."""
    output_url_prefixes: str = ""
    """Comma-separated `s3://bucket/prefix/` entries where jobs may deliver with
    `output_url`; empty: `output_url` is refused."""


class QuotaSettings(BaseSettings):
    """Quotas per API key (0: off). Each holds under concurrent requests."""

    model_config = CONFIG

    rate_limit_per_minute: int = 0
    """Requests per key per minute; past it a 429 `rate_limit_exceeded` with `Retry-After`.
    Counted in Redis when the broker is Redis (shared by every API process), else in the
    process."""
    max_active_jobs_per_key: int = 0
    """Jobs a key may have queued or in progress; the next gets a 429
    `too_many_active_jobs`. Reserved atomically (a per-key lock row): submits at once never
    pass it; a re-render counts as a job."""
    max_chars_per_day_per_key: int = 0
    """Job characters a key may be charged in any 24 hours (jobs, and what a re-render
    speaks again); past it a 429 `daily_quota_exceeded`."""
    job_priorities: str = "normal,low"
    """The job priorities every key may ask for (`high`, `normal`, `low`, comma-separated);
    another gets a 403 `priority_not_allowed`. Add `high` where every key may jump ahead
    of the others' work, or give it to some stored keys only (`narrator keys set ID
    --priorities high,normal,low`)."""

    @property
    def allowed_priorities(self) -> frozenset[str]:
        """JOB_PRIORITIES as a set."""
        return frozenset(p.strip() for p in self.job_priorities.split(",") if p.strip())


class ApiSettings(CoreSettings, AccessSettings, LimitSettings, QuotaSettings):
    """Everything the API process reads."""

    model_config = CONFIG

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
