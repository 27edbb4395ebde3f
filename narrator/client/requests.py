"""What both clients share: each API call built once as a Request, the retry policy, and
what a job's end means."""

import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from narrator.client.errors import RETRIED, Job, JobFailed, error_for, retry_after

Progress = Callable[[Job], None]
TEXT_SUFFIXES = {".md": "markdown", ".markdown": "markdown"}
ENDED = ("completed", "failed", "cancelled", "deleted")


class Speech(bytes):
    """Audio bytes, with the duration the API reported (`X-Audio-Duration`), in seconds."""

    duration: float | None = None

    @classmethod
    def of(cls, response: httpx.Response) -> "Speech":
        audio = cls(response.content)
        with contextlib.suppress(KeyError, ValueError):
            audio.duration = float(response.headers["x-audio-duration"])
        return audio


@dataclass
class Request:
    """One API call, built once and sent by either client."""

    method: str
    path: str
    json: Any = None
    data: dict[str, str] | None = None
    files: dict[str, tuple[str, bytes]] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": self.params or None, "headers": self.headers or None}
        if self.files:
            out |= {"files": self.files, "data": self.data}
        elif self.json is not None:
            out["json"] = self.json
        return out


def speech_request(input: str, voice: str | None, model: str | None, response_format: str,
            speed: float, fields: dict[str, Any]) -> Request:
    body = {"input": input, "response_format": response_format, "speed": speed} | {
        k: v for k, v in (("voice", voice), ("model", model)) if v} | fields
    return Request("POST", "/v1/audio/speech", json=body)


def submission(source: str | Path | None, chapters: list[dict[str, Any]] | None,
                cover: str | Path | None, idempotency_key: str | None,
                fields: dict[str, Any]) -> Request:
    """A job from text, a Markdown or text file, an EPUB, or chapters, with any job field;
    the same idempotency key and body give back the same job, so a retried submit is safe."""
    body = dict(fields)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    files: dict[str, tuple[str, bytes]] = {}
    if chapters is not None:
        body["chapters"] = chapters
    elif isinstance(source, Path):
        if source.suffix.lower() == ".epub":
            files["file"] = (source.name, source.read_bytes())
        else:
            body["input"] = source.read_text(encoding="utf-8")
            if source.suffix.lower() in TEXT_SUFFIXES:
                body.setdefault("input_format", TEXT_SUFFIXES[source.suffix.lower()])
    elif source is not None:
        body["input"] = source
    else:
        raise ValueError("give a text, a file or chapters")
    if cover is not None:
        cover = Path(cover)
        files["cover"] = (cover.name, cover.read_bytes())
    if files:
        return Request("POST", "/v1/audio/jobs", data={"request": json.dumps(body)},
                        files=files, headers=headers)
    return Request("POST", "/v1/audio/jobs", json=body, headers=headers)


def content(job: Job | str, variant: str | None, index: int | None) -> Request:
    params = {k: v for k, v in (("variant", variant), ("index", index)) if v is not None}
    return Request("GET", f"/v1/audio/jobs/{job_id(job)}/content", params=params)


def job_id(job: Job | str) -> str:
    return job if isinstance(job, str) else str(job["id"])


def pause(attempt: int, response: httpx.Response | None) -> float:
    """Seconds before retry `attempt` (1, 2, ...): Retry-After when given, else backoff."""
    asked = retry_after(response) if response is not None else None
    if asked is not None:
        return min(asked, 60.0)
    return min(0.5 * 2.0 ** (attempt - 1), 8.0) * (0.5 + random.random() / 2)


def answered(response: httpx.Response, attempt: int, retries: int) -> bool:
    """Say whether an answer is final (True; an error raises) or is retried (429, 503)."""
    if response.status_code in RETRIED and attempt <= retries:
        return False
    if response.is_error:
        raise error_for(response)
    return True


def ended(state: Job) -> bool:
    """Say whether a job has ended: True when completed; raises JobFailed for another end."""
    if state["status"] not in ENDED:
        return False
    if state["status"] != "completed":
        raise JobFailed(state)
    return True
