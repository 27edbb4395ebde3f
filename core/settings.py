"""The one settings base: what every Narrator process reads (prefix NARRATOR_).

Settings are grouped by concern, one class each; a process's settings class inherits the
groups it reads, so each variable has one default and one description (the docstring under
its field), and keeps its flat name (NARRATOR_BROKER_URL, not a nested one). The database's
and storage's own groups live in models/ and storage/ (they import nothing above them); the
API's and the workers' settings add the groups only they read. docs/configuration.md is
generated from these classes (`python -m narrator.configuration`).
"""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings

from models.settings import CONFIG, DatabaseSettings
from storage.settings import StorageSettings


class BrokerSettings(BaseSettings):
    """Broker: how tasks and sync results travel between the API and the workers."""

    model_config = CONFIG

    broker_url: str = ""
    """`redis://host:6379/0`; sync results then travel on Redis streams. Empty: the embedded
    filesystem broker under DATA_DIR (one host only)."""
    broker_poll_seconds: float = 0.01
    """Polling of the embedded broker where its folder cannot be watched (no inotify) or a
    consumer's prefetch is full; otherwise consumers wake as messages land."""


class SpeechSettings(BaseSettings):
    """Speech: the engine and model the workers run, and the text planner both sides share."""

    model_config = CONFIG

    engine: str = "piper"
    """`piper` (CPU), `kokoro` (CPU, Kokoro-82M: five voices) or `vllm-omni` (GPU,
    Qwen3-TTS). `narrator serve` on Piper also runs a Kokoro worker where Kokoro's package
    is installed (SERVE_KOKORO), so both engines' voices are offered."""
    model: str = ""
    """Piper: the model id (empty: `piper`, the bundled voice). vLLM-Omni: a checkpoint
    folder, or a hub id already in the local cache (nothing is fetched at run time)."""
    mark_output: bool = True
    """Mark every output as AI-generated in its container's metadata (core/marking.py: ID3
    for MP3, MP4 atoms for m4b, Vorbis comments for FLAC and Opus, a RIFF INFO chunk and ID3
    for WAV; job files, sync answers and streamed WAV headers): the software, model, voice,
    job id and a statement. Raw PCM and AAC carry none. Set it alike on the API and the
    workers."""
    c2pa_cert: str = ""
    """A PEM file of the certificate chain (signer first) that signs a C2PA manifest into
    every MP3, WAV, FLAC and m4b a worker makes (job files and sync answers), stating that
    a generative model made it; empty: no manifest. Read by the workers. The certificate
    must be an end-entity one issued by a CA (not self-signed), with a digital-signature key
    usage; readers trust it where its CA is on their trust list."""
    c2pa_key: str = ""
    """The PEM private key of C2PA_CERT's signer."""
    c2pa_alg: Literal["es256", "es384", "es512", "ps256", "ps384", "ps512", "ed25519"] = "es256"
    """The signing algorithm of C2PA_KEY."""
    serve_kokoro: bool = True
    """`narrator serve` on Piper also runs a worker for Kokoro (`realtime.kokoro`,
    `batch.kokoro`) where its package is installed, so both engines' voices are offered;
    false: Piper's worker only (about 250 MB less memory)."""
    aligner: Literal["pocketsphinx", "qwen3"] = "pocketsphinx"
    """The forced aligner of the workers that run `narrator.align_segment`: `pocketsphinx`
    (CPU, bundled en-us model: English) or `qwen3`: Qwen3-ForcedAligner-0.6B through vLLM on
    that worker's GPU (workers/aligners/qwen3.py; the segments that arrive together are
    aligned in one batch), for English, Chinese, German, French, Spanish, Portuguese,
    Italian, Indonesian and Arabic. Set it the same for the API, which accepts `words`
    subtitles in those languages only. Any other value stops the process at start."""
    recognizer: Literal["pocketsphinx", "qwen3"] = "pocketsphinx"
    """The recogniser of the recognition check (`verify`), read by the API and the workers
    alike: `pocketsphinx` (CPU, English) or `qwen3`: Qwen3-ASR through vLLM on the GPU of
    the workers that check segments, which hears en, zh, de, fr, es, pt, it, id and ar; the
    API refuses `verify` in other languages. Qwen3-ASR gives no word times, so the aligner
    still places words."""
    segment_chars: int = 400
    """Target segment size in characters; a sentence is split only when it alone is longer.
    Read by the planner on a worker and by the API when a re-render changes a chapter."""
    sentence_gap_seconds: float = 0.25
    """Silence between segments, and between the pieces of a split sync answer."""
    paragraph_gap_seconds: float = 0.6
    """Silence between paragraphs."""
    chapter_gap_seconds: float = 1.5
    """Silence between chapters (in one-file outputs)."""


class LinkSettings(BaseSettings):
    """Links and webhooks: the API's public address and what webhooks may call."""

    model_config = CONFIG

    public_api_url: str = ""
    """Base of API content URLs (behind a proxy, and in webhook payloads); empty: the
    request's own base URL in the API, `http://127.0.0.1:8000` in workers."""
    webhook_secret: str = ""
    """Signs webhooks: `X-Narrator-Signature: t=<unix>,v1=<hex>`, HMAC-SHA256 over
    `"<t>.<body>"`; receivers should check it and reject old timestamps. Empty: unsigned."""
    outbound_allow: str = ""
    """Webhooks go only to http(s) URLs whose host resolves to public addresses (no loopback,
    private, link-local or metadata, CGNAT, multicast or reserved ones), checked at submit
    (400 `webhook_url_refused`) and again before each delivery, without following redirects;
    comma-separated CIDRs or host names listed here are allowed anyway."""


class SyncSettings(BaseSettings):
    """Sync speech: how long `POST /v1/audio/speech` waits for a worker and for its frames."""

    model_config = CONFIG

    sync_timeout_seconds: float = 120.0
    """How long a sync request waits for a worker to take it (then 503)."""
    sync_keepalive_seconds: float = 1.0
    """A worker speaking a sync request sends a keepalive frame this often."""
    sync_silence_seconds: float = 5.0
    """Once a worker took a sync request, this long without a frame from it means it is gone
    (it died, or lost the broker): a sync request gets 503 `worker_lost` (`Retry-After: 1`),
    a stream that has begun is cut."""


class LogSettings(BaseSettings):
    """Logs: structured lines from every process (structlog)."""

    model_config = CONFIG

    log_level: str = "INFO"
    """`DEBUG`, `INFO`, `WARNING` or `ERROR`. Every API line carries `request_id` (also
    returned as `X-Request-Id`), every worker line `task` and `task_id`, and job work
    `job_id` (and `segment`)."""
    log_json: bool | None = None
    """`true`: one JSON object per line; `false`: coloured console lines; unset: JSON when
    the output is not a terminal."""


class CoreSettings(DatabaseSettings, StorageSettings, BrokerSettings, SpeechSettings,
                   LinkSettings, SyncSettings, LogSettings):
    """What both the API and the workers read."""

    model_config = CONFIG

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
