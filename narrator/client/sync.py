"""The sync client."""

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from narrator.client import live
from narrator.client.errors import Conflict, Job
from narrator.client.requests import (
    Progress,
    Request,
    Speech,
    answered,
    content,
    ended,
    job_id,
    pause,
    speech_request,
    submission,
)


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

    def _send(self, request: Request, stream: bool = False) -> httpx.Response:
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
                if answered(response, attempt, self.retries):
                    return response
                response.close()
            time.sleep(pause(attempt, response))
        raise AssertionError("unreachable")

    def _json(self, request: Request) -> Any:
        return self._send(request).json()

    def speak(self, input: str, *, voice: str | None = None, model: str | None = None,
              response_format: str = "mp3", speed: float = 1.0, **fields: Any) -> Speech:
        """Return the audio of `input` (any sync speech field may be passed, e.g.
        `lexicons`, `instructions`, `language`)."""
        return Speech.of(self._send(speech_request(input, voice, model, response_format, speed,
                                            fields)))

    def speak_stream(self, input: str, *, voice: str | None = None, model: str | None = None,
                     response_format: str = "pcm", speed: float = 1.0,
                     **fields: Any) -> Iterator[bytes]:
        """Yield the audio of `input` as the server streams it (`stream_format` "audio")."""
        request = speech_request(input, voice, model, response_format, speed,
                          {"stream_format": "audio"} | fields)
        response = self._send(request, stream=True)
        try:
            yield from response.iter_bytes()
        finally:
            response.close()

    def speak_live(self, text: Iterable[str], *, voice: str | None = None,
                   model: str | None = None, **fields: Any) -> Iterator[live.Piece]:
        """Speak text as it is written (`text`: its pieces, such as an LLM's tokens) over the
        WebSocket: yield each sentence's audio (bytes: 16-bit mono PCM, or MP3 frames with
        `response_format="mp3"`) between its
        `sentence.start` and `sentence.end` events (dicts), then `done`. The pieces are sent
        from a thread as `text` yields them; an error event raises its NarratorError."""
        from websockets.sync.client import connect

        headers = {"Authorization": self._http.headers["authorization"]} \
            if "authorization" in self._http.headers else {}
        with connect(live.socket_url(str(self._http.base_url)), additional_headers=headers,
                     max_size=None) as socket:
            socket.send(live.config(voice, model, fields))

            def write() -> None:
                with contextlib.suppress(ConnectionClosed):
                    for piece in text:
                        socket.send(live.delta(piece))
                    socket.send(live.CLOSE)

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            with contextlib.suppress(ConnectionClosedOK):
                for frame in socket:
                    yield live.received(frame)
            writer.join()

    def submit(self, source: str | Path | None = None, *,
               chapters: list[dict[str, Any]] | None = None, cover: str | Path | None = None,
               idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job: a text, a file (.txt, .md, .epub) or `chapters`, with job fields.
        Without `idempotency_key`, a submit retried after a 503 may make two jobs."""
        job: Job = self._json(submission(source, chapters, cover, idempotency_key, fields))
        return job

    def get(self, job: Job | str) -> Job:
        """Return a job's current state."""
        found: Job = self._json(Request("GET", f"/v1/audio/jobs/{job_id(job)}"))
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
            if ended(state):
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {state['id']} still {state['status']}")
            time.sleep(poll)
            state = self.get(state)

    def download(self, job: Job | str, to: str | Path, *, variant: str | None = None,
                 index: int | None = None) -> Path:
        """Write the job's audio, or a side file (`variant`: subtitles_srt, subtitles_vtt,
        subtitles_words, manifest, chapter with `index`), to `to`, streamed."""
        path = Path(to)
        response = self._send(content(job, variant, index), stream=True)
        try:
            with path.open("wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)
        finally:
            response.close()
        return path

    def cancel(self, job: Job | str) -> Job:
        """Stop a job; segments already done stay done."""
        ended: Job = self._json(Request("POST", f"/v1/audio/jobs/{job_id(job)}/cancel"))
        return ended

    def retry(self, job: Job | str) -> Job:
        """Run a failed or cancelled job again: only what did not finish."""
        again: Job = self._json(Request("POST", f"/v1/audio/jobs/{job_id(job)}/retry"))
        return again

    def voices(self) -> list[dict[str, Any]]:
        """Return the voices (`GET /v1/audio/voices`)."""
        voices: list[dict[str, Any]] = self._json(Request("GET", "/v1/audio/voices"))["voices"]
        return voices

    def models(self) -> list[dict[str, Any]]:
        """Return the models (`GET /v1/models`)."""
        models: list[dict[str, Any]] = self._json(Request("GET", "/v1/models"))["data"]
        return models

    def save_lexicon(self, name: str, entries: list[dict[str, str]]) -> dict[str, Any]:
        """Create the pronunciation lexicon `name`, or replace the one of that name."""
        body = {"name": name, "entries": entries}
        try:
            made: dict[str, Any] = self._json(Request("POST", "/v1/audio/lexicons", json=body))
        except Conflict:
            made = self._json(Request("PUT", f"/v1/audio/lexicons/{name}", json=body))
        return made
