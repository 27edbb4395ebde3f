"""Text streamed in over `WS /v1/audio/speech/stream`, for both clients: the messages the
client sends, and what each one the server sends becomes (audio bytes, an event dict, or a
typed error)."""

import json
from typing import Any

from narrator.client.errors import (
    BadRequest,
    NarratorError,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
)

# An error event's code -> the exception a client raises for it.
_BY_CODE: dict[str, type[NarratorError]] = {
    "missing_api_key": Unauthorized, "invalid_api_key": Unauthorized,
    "rate_limit_exceeded": RateLimited, "worker_lost": Unavailable,
    "dependency_unavailable": Unavailable, "engine_error": ServerError}

Piece = bytes | dict[str, Any]  # audio (16-bit mono PCM), or an event


def socket_url(base_url: str) -> str:
    """The streaming route's ws:// or wss:// URL for an API base URL."""
    return base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1) \
        + "/v1/audio/speech/stream"


def config(voice: str | None, model: str | None, fields: dict[str, Any]) -> str:
    """The `session.config` message."""
    given = {"voice": voice, "model": model} | fields
    return json.dumps({"type": "session.config"} | {k: v for k, v in given.items()
                                                    if v is not None})


def delta(text: str) -> str:
    """A `text.delta` message."""
    return json.dumps({"type": "text.delta", "text": text})


CLOSE = json.dumps({"type": "session.close"})


def received(frame: str | bytes) -> Piece:
    """What a frame from the server is: audio, or an event (an error event raises)."""
    if isinstance(frame, bytes):
        return frame
    event: dict[str, Any] = json.loads(frame)
    if event.get("type") == "error":
        error = event.get("error") or {}
        raise _BY_CODE.get(str(error.get("code")), BadRequest)(0, error)
    return event
