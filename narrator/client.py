"""A typed Python client for Narrator's API, sync (`Narrator`) and async (`AsyncNarrator`).

    from narrator.client import Narrator

    with Narrator("http://127.0.0.1:8000", api_key="...") as tts:
        audio = tts.speak("Hello there.", response_format="wav")
        job = tts.submit(Path("book.epub"), response_format="m4b", subtitles=["srt"])
        job = tts.wait(job, progress=lambda j: print(j["progress"], j.get("eta_seconds")))
        tts.download(job, Path("book.m4b"))
        tts.download(job, Path("book.srt"), variant="subtitles_srt")

Errors come back as `NarratorError` subclasses carrying the API's error object. 429 and 503
answers are retried with backoff, waiting what `Retry-After` says, up to `retries` times;
a connection refused or reset before an answer is retried the same way. Jobs, voices and
models are returned as the API's JSON objects (dicts): the contract is ../shared/API.md.
"""

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

Job = dict[str, Any]
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


class NarratorError(Exception):
    """The API answered with an error; `error` is its `{"message", "type", "param", "code"}`."""

    def __init__(self, status: int, error: dict[str, Any], retry_after: float | None = None
                 ) -> None:
        super().__init__(f"{status} {error.get('type') or 'error'}: {error.get('message')}")
        self.status = status
        self.error = error
        self.message: str = str(error.get("message") or "")
        self.code: str | None = error.get("code")
        self.param: str | None = error.get("param")
        self.retry_after = retry_after


class BadRequest(NarratorError):
    """400, 413 or 422: the request is wrong (the message says which field)."""


class Unauthorized(NarratorError):
    """401 or 403: a missing or wrong API key."""


class NotFound(NarratorError):
    """404: no such job, voice or model (or one that belongs to another key)."""


class Conflict(NarratorError):
    """409: e.g. content asked for before the job is completed."""


class RateLimited(NarratorError):
    """429: over a rate limit or quota, after the client's retries."""


class Unavailable(NarratorError):
    """503: a dependency of the API is down, after the client's retries."""


class ServerError(NarratorError):
    """Any other 5xx."""


class JobFailed(Exception):
    """`wait` saw the job end other than `completed`; `job` is its last state."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.get('id')} {job.get('status')}: {job.get('error')}")
        self.job = job


_BY_STATUS: dict[int, type[NarratorError]] = {
    400: BadRequest, 413: BadRequest, 422: BadRequest, 401: Unauthorized, 403: Unauthorized,
    404: NotFound, 409: Conflict, 429: RateLimited, 503: Unavailable}
RETRIED = (429, 503)


def error_for(response: httpx.Response) -> NarratorError:
    """Return the typed exception for an error answer."""
    try:
        error = response.json()["error"]
        assert isinstance(error, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        error = {"message": response.text[:500], "type": None, "param": None, "code": None}
    kind = _BY_STATUS.get(response.status_code,
                          ServerError if response.status_code >= 500 else NarratorError)
    return kind(response.status_code, error, retry_after(response))


def retry_after(response: httpx.Response) -> float | None:
    """Return the seconds a Retry-After header asks for (delta-seconds form), or None."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


@dataclass
class _Request:
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


def _speech(input: str, voice: str | None, model: str | None, response_format: str,
            speed: float, fields: dict[str, Any]) -> _Request:
    body = {"input": input, "response_format": response_format, "speed": speed} | {
        k: v for k, v in (("voice", voice), ("model", model)) if v} | fields
    return _Request("POST", "/v1/audio/speech", json=body)


def _submission(source: str | Path | None, chapters: list[dict[str, Any]] | None,
                cover: Path | None, idempotency_key: str | None,
                fields: dict[str, Any]) -> _Request:
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
        files["cover"] = (cover.name, cover.read_bytes())
    if files:
        return _Request("POST", "/v1/audio/jobs", data={"request": json.dumps(body)},
                        files=files, headers=headers)
    return _Request("POST", "/v1/audio/jobs", json=body, headers=headers)


def _content(job: Job | str, variant: str | None, index: int | None) -> _Request:
    params = {k: v for k, v in (("variant", variant), ("index", index)) if v is not None}
    return _Request("GET", f"/v1/audio/jobs/{_id(job)}/content", params=params)


def _id(job: Job | str) -> str:
    return job if isinstance(job, str) else str(job["id"])


def _pause(attempt: int, response: httpx.Response | None) -> float:
    """Seconds before retry `attempt` (1, 2, ...): Retry-After when given, else backoff."""
    asked = retry_after(response) if response is not None else None
    if asked is not None:
        return min(asked, 60.0)
    return min(0.5 * 2.0 ** (attempt - 1), 8.0) * (0.5 + random.random() / 2)


def _answered(response: httpx.Response, attempt: int, retries: int) -> bool:
    """Say whether an answer is final (True; an error raises) or is retried (429, 503)."""
    if response.status_code in RETRIED and attempt <= retries:
        return False
    if response.is_error:
        raise error_for(response)
    return True


def _ended(state: Job) -> bool:
    """Say whether a job has ended: True when completed; raises JobFailed for another end."""
    if state["status"] not in ENDED:
        return False
    if state["status"] != "completed":
        raise JobFailed(state)
    return True


class Narrator:
    """The sync client. `transport` is httpx's (tests and custom TLS); use as a context
    manager or call close()."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 *, timeout: float = 300, retries: int = 4,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = retries
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                  timeout=timeout, transport=transport)

    def __enter__(self) -> "Narrator":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, request: _Request, stream: bool = False) -> httpx.Response:
        for attempt in range(1, self.retries + 2):
            response: httpx.Response | None = None
            try:
                built = self._http.build_request(request.method, request.path,
                                                 **request.kwargs())
                response = self._http.send(built, stream=stream)
            except (httpx.ConnectError, httpx.RemoteProtocolError):
                if attempt > self.retries:
                    raise
            else:
                if response.is_error:
                    response.read()
                if _answered(response, attempt, self.retries):
                    return response
                response.close()
            time.sleep(_pause(attempt, response))
        raise AssertionError("unreachable")

    def _json(self, request: _Request) -> Any:
        return self._send(request).json()

    def speak(self, input: str, *, voice: str | None = None, model: str | None = None,
              response_format: str = "mp3", speed: float = 1.0, **fields: Any) -> Speech:
        """Return the audio of `input` (any sync speech field may be passed, e.g.
        `lexicons`, `instructions`, `language`)."""
        return Speech.of(self._send(_speech(input, voice, model, response_format, speed,
                                            fields)))

    def speak_stream(self, input: str, *, voice: str | None = None, model: str | None = None,
                     response_format: str = "pcm", speed: float = 1.0,
                     **fields: Any) -> Iterator[bytes]:
        """Yield the audio of `input` as the server streams it (`stream_format` "audio")."""
        request = _speech(input, voice, model, response_format, speed,
                          {"stream_format": "audio"} | fields)
        response = self._send(request, stream=True)
        try:
            yield from response.iter_bytes()
        finally:
            response.close()

    def submit(self, source: str | Path | None = None, *,
               chapters: list[dict[str, Any]] | None = None, cover: Path | None = None,
               idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job: a text, a file (.txt, .md, .epub) or `chapters`, with job fields.
        Without `idempotency_key`, a submit retried after a 503 may make two jobs."""
        job: Job = self._json(_submission(source, chapters, cover, idempotency_key, fields))
        return job

    def get(self, job: Job | str) -> Job:
        """Return a job's current state."""
        found: Job = self._json(_Request("GET", f"/v1/audio/jobs/{_id(job)}"))
        return found

    def wait(self, job: Job | str, *, progress: Progress | None = None, poll: float = 1.0,
             timeout: float | None = None) -> Job:
        """Poll until the job ends; call `progress` with each state (`progress`,
        `eta_seconds`, `segments`). Returns the completed job, else raises JobFailed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        state = job if isinstance(job, dict) and "status" in job else self.get(job)
        while True:
            if progress is not None:
                progress(state)
            if _ended(state):
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {state['id']} still {state['status']}")
            time.sleep(poll)
            state = self.get(state)

    def download(self, job: Job | str, to: Path, *, variant: str | None = None,
                 index: int | None = None) -> Path:
        """Write the job's audio, or a side file (`variant`: subtitles_srt, subtitles_vtt,
        subtitles_words, manifest, chapter with `index`), to `to`, streamed."""
        response = self._send(_content(job, variant, index), stream=True)
        try:
            with to.open("wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)
        finally:
            response.close()
        return to

    def cancel(self, job: Job | str) -> Job:
        """Stop a job; segments already done stay done."""
        ended: Job = self._json(_Request("POST", f"/v1/audio/jobs/{_id(job)}/cancel"))
        return ended

    def retry(self, job: Job | str) -> Job:
        """Run a failed or cancelled job again: only what did not finish."""
        again: Job = self._json(_Request("POST", f"/v1/audio/jobs/{_id(job)}/retry"))
        return again

    def voices(self) -> list[dict[str, Any]]:
        """Return the voices (`GET /v1/audio/voices`)."""
        voices: list[dict[str, Any]] = self._json(_Request("GET", "/v1/audio/voices"))["voices"]
        return voices

    def models(self) -> list[dict[str, Any]]:
        """Return the models (`GET /v1/models`)."""
        models: list[dict[str, Any]] = self._json(_Request("GET", "/v1/models"))["data"]
        return models

    def save_lexicon(self, name: str, entries: list[dict[str, str]]) -> dict[str, Any]:
        """Create the pronunciation lexicon `name`, or replace the one of that name."""
        body = {"name": name, "entries": entries}
        try:
            made: dict[str, Any] = self._json(_Request("POST", "/v1/audio/lexicons", json=body))
        except Conflict:
            made = self._json(_Request("PUT", f"/v1/audio/lexicons/{name}", json=body))
        return made


class AsyncNarrator:
    """The async client: the same methods as `Narrator`, awaited."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 *, timeout: float = 300, retries: int = 4,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                       timeout=timeout, transport=transport)

    async def __aenter__(self) -> "AsyncNarrator":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, request: _Request, stream: bool = False) -> httpx.Response:
        for attempt in range(1, self.retries + 2):
            response: httpx.Response | None = None
            try:
                built = self._http.build_request(request.method, request.path,
                                                 **request.kwargs())
                response = await self._http.send(built, stream=stream)
            except (httpx.ConnectError, httpx.RemoteProtocolError):
                if attempt > self.retries:
                    raise
            else:
                if response.is_error:
                    await response.aread()
                if _answered(response, attempt, self.retries):
                    return response
                await response.aclose()
            await asyncio.sleep(_pause(attempt, response))
        raise AssertionError("unreachable")

    async def _json(self, request: _Request) -> Any:
        return (await self._send(request)).json()

    async def speak(self, input: str, *, voice: str | None = None, model: str | None = None,
                    response_format: str = "mp3", speed: float = 1.0, **fields: Any) -> Speech:
        """Return the audio of `input`."""
        request = _speech(input, voice, model, response_format, speed, fields)
        return Speech.of(await self._send(request))

    async def speak_stream(self, input: str, *, voice: str | None = None,
                           model: str | None = None, response_format: str = "pcm",
                           speed: float = 1.0, **fields: Any) -> AsyncIterator[bytes]:
        """Yield the audio of `input` as the server streams it."""
        request = _speech(input, voice, model, response_format, speed,
                          {"stream_format": "audio"} | fields)
        response = await self._send(request, stream=True)
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        finally:
            await response.aclose()

    async def submit(self, source: str | Path | None = None, *,
                     chapters: list[dict[str, Any]] | None = None, cover: Path | None = None,
                     idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job (see Narrator.submit)."""
        job: Job = await self._json(_submission(source, chapters, cover, idempotency_key,
                                                fields))
        return job

    async def get(self, job: Job | str) -> Job:
        """Return a job's current state."""
        found: Job = await self._json(_Request("GET", f"/v1/audio/jobs/{_id(job)}"))
        return found

    async def wait(self, job: Job | str, *, progress: Progress | None = None,
                   poll: float = 1.0) -> Job:
        """Poll until the job ends (see Narrator.wait; bound it with asyncio.timeout)."""
        state = job if isinstance(job, dict) and "status" in job else await self.get(job)
        while True:
            if progress is not None:
                progress(state)
            if _ended(state):
                return state
            await asyncio.sleep(poll)
            state = await self.get(state)

    async def download(self, job: Job | str, to: Path, *, variant: str | None = None,
                       index: int | None = None) -> Path:
        """Write the job's audio or a side file to `to` (see Narrator.download)."""
        response = await self._send(_content(job, variant, index), stream=True)
        try:
            with to.open("wb") as out:
                async for chunk in response.aiter_bytes():
                    out.write(chunk)
        finally:
            await response.aclose()
        return to

    async def cancel(self, job: Job | str) -> Job:
        """Stop a job."""
        ended: Job = await self._json(_Request("POST", f"/v1/audio/jobs/{_id(job)}/cancel"))
        return ended

    async def retry(self, job: Job | str) -> Job:
        """Run a failed or cancelled job again."""
        again: Job = await self._json(_Request("POST", f"/v1/audio/jobs/{_id(job)}/retry"))
        return again

    async def voices(self) -> list[dict[str, Any]]:
        """Return the voices."""
        voices: list[dict[str, Any]] = (await self._json(
            _Request("GET", "/v1/audio/voices")))["voices"]
        return voices

    async def models(self) -> list[dict[str, Any]]:
        """Return the models."""
        models: list[dict[str, Any]] = (await self._json(_Request("GET", "/v1/models")))["data"]
        return models
