"""The async client."""

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import anyio
import httpx
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from narrator.client import live
from narrator.client.errors import Job
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

    async def _send(self, request: Request, stream: bool = False) -> httpx.Response:
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
                if answered(response, attempt, self.retries):
                    return response
                await response.aclose()
            await asyncio.sleep(pause(attempt, response))
        raise AssertionError("unreachable")

    async def _json(self, request: Request) -> Any:
        return (await self._send(request)).json()

    async def speak(self, input: str, *, voice: str | None = None, model: str | None = None,
                    response_format: str = "mp3", speed: float = 1.0, **fields: Any) -> Speech:
        """Return the audio of `input`."""
        request = speech_request(input, voice, model, response_format, speed, fields)
        return Speech.of(await self._send(request))

    async def speak_stream(self, input: str, *, voice: str | None = None,
                           model: str | None = None, response_format: str = "pcm",
                           speed: float = 1.0, **fields: Any) -> AsyncIterator[bytes]:
        """Yield the audio of `input` as the server streams it."""
        request = speech_request(input, voice, model, response_format, speed,
                          {"stream_format": "audio"} | fields)
        response = await self._send(request, stream=True)
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        finally:
            await response.aclose()

    async def speak_live(self, text: Iterable[str] | AsyncIterable[str], *,
                         voice: str | None = None, model: str | None = None,
                         **fields: Any) -> AsyncIterator[live.Piece]:
        """`Narrator.speak_live`, awaited: `text` may be an async iterable (an LLM's stream);
        it is sent from a task of its own while the audio and events are yielded."""
        from websockets.asyncio.client import connect

        headers = {"Authorization": self._http.headers["authorization"]} \
            if "authorization" in self._http.headers else {}
        async with connect(live.socket_url(str(self._http.base_url)),
                           additional_headers=headers, max_size=None) as socket:
            await socket.send(live.config(voice, model, fields))

            async def write() -> None:
                with contextlib.suppress(ConnectionClosed):
                    if isinstance(text, AsyncIterable):
                        async for piece in text:
                            await socket.send(live.delta(piece))
                    else:
                        for piece in text:
                            await socket.send(live.delta(piece))
                    await socket.send(live.CLOSE)

            writer = asyncio.create_task(write())
            try:
                with contextlib.suppress(ConnectionClosedOK):
                    async for frame in socket:
                        yield live.received(frame)
            finally:
                writer.cancel()

    async def submit(self, source: str | Path | None = None, *,
                     chapters: list[dict[str, Any]] | None = None, cover: str | Path | None = None,
                     idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job (see Narrator.submit)."""
        job: Job = await self._json(submission(source, chapters, cover, idempotency_key,
                                                fields))
        return job

    async def get(self, job: Job | str) -> Job:
        """Return a job's current state."""
        found: Job = await self._json(Request("GET", f"/v1/audio/jobs/{job_id(job)}"))
        return found

    async def wait(self, job: Job | str, *, progress: Progress | None = None,
                   poll: float = 1.0) -> Job:
        """Poll until the job ends (see Narrator.wait; bound it with asyncio.timeout)."""
        state = job if isinstance(job, dict) and "status" in job else await self.get(job)
        while True:
            if progress is not None:
                progress(state)
            if ended(state):
                return state
            await asyncio.sleep(poll)
            state = await self.get(state)

    async def download(self, job: Job | str, to: str | Path, *, variant: str | None = None,
                       index: int | None = None) -> Path:
        """Write the job's audio or a side file to `to` (see Narrator.download)."""
        path = Path(to)
        response = await self._send(content(job, variant, index), stream=True)
        try:
            async with await anyio.open_file(path, "wb") as out:  # off the event loop
                async for chunk in response.aiter_bytes():
                    await out.write(chunk)
        finally:
            await response.aclose()
        return path

    async def cancel(self, job: Job | str) -> Job:
        """Stop a job."""
        ended: Job = await self._json(Request("POST", f"/v1/audio/jobs/{job_id(job)}/cancel"))
        return ended

    async def retry(self, job: Job | str) -> Job:
        """Run a failed or cancelled job again."""
        again: Job = await self._json(Request("POST", f"/v1/audio/jobs/{job_id(job)}/retry"))
        return again

    async def voices(self) -> list[dict[str, Any]]:
        """Return the voices."""
        voices: list[dict[str, Any]] = (await self._json(
            Request("GET", "/v1/audio/voices")))["voices"]
        return voices

    async def models(self) -> list[dict[str, Any]]:
        """Return the models."""
        models: list[dict[str, Any]] = (await self._json(Request("GET", "/v1/models")))["data"]
        return models
