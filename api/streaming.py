"""Streamed sync speech: raw PCM, WAV with an open-ended header, or server-sent events."""

import base64
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from api.errors import ApiError, unavailable
from core.channel import Channel, ChannelTimeout, Message
from core.marking import Provenance, riff_info

UNKNOWN_SIZE = 0xFFFFFFFF


def wav_header(sample_rate: int, provenance: Provenance | None = None) -> bytes:
    """Return a 16-bit mono WAV header whose sizes say 'unknown' (streaming), with the
    marks that it is synthetic (a LIST/INFO chunk before the samples) given `provenance`."""
    return (b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + (riff_info(provenance) if provenance else b"")
            + b"data" + struct.pack("<I", UNKNOWN_SIZE))


def engine_error(message: Message) -> ApiError:
    """Render a worker's error frame."""
    return ApiError(500, f"the engine failed: {message.meta.get('message')}",
                    type="server_error", code="engine_error")


def no_worker(waited: float) -> ApiError:
    """Render a request that no worker took in time."""
    return unavailable(f"no worker answered within {waited:.0f} s; is a worker running on "
                       "the realtime queue?", retry_after=10)


def worker_lost(silence: float) -> ApiError:
    """Render a request whose worker stopped sending frames (it died, or lost the broker)."""
    return ApiError(503, f"the worker speaking this request went silent for {silence:g} s "
                    "(it stopped or lost its connection); send the request again",
                    type="service_unavailable", code="worker_lost",
                    headers={"Retry-After": "1"})


async def first_frame(frames: AsyncIterator[Message], waited: float) -> Message:
    """Wait for the worker's first frame, so failures before audio are still HTTP errors."""
    try:
        message = await anext(frames)
    except ChannelTimeout as exc:
        raise no_worker(waited) from exc
    if message.kind == "error":
        raise engine_error(message)
    return message


async def on_first_audio(frames: AsyncIterator[Message],
                         call: Callable[[], object]) -> AsyncIterator[Message]:
    """Pass `frames` through, calling `call` when the first audio chunk arrives."""
    waiting = True
    async for message in frames:
        if waiting and message.kind == "data":
            call()
            waiting = False
        yield message


async def pcm_body(frames: AsyncIterator[Message], head: bytes) -> AsyncIterator[bytes]:
    """Yield `head` then every PCM chunk; a mid-stream failure ends the body early."""
    if head:
        yield head
    async for message in frames:
        if message.kind == "data":
            yield message.data
        elif message.kind in ("end", "error"):
            return


async def sse_body(frames: AsyncIterator[Message], characters: int) -> AsyncIterator[bytes]:
    """Yield speech.audio.delta events (base64 PCM), then speech.audio.done with usage."""
    async for message in frames:
        event: dict[str, Any]
        if message.kind == "data":
            event = {"type": "speech.audio.delta",
                     "audio": base64.b64encode(message.data).decode()}
        elif message.kind == "end":
            event = {"type": "speech.audio.done",
                     "usage": {"input_characters": characters,
                               "audio_seconds": round(message.meta["duration"], 3)}}
        elif message.kind == "error":
            event = {"type": "error", "error": {"message": message.meta.get("message"),
                                                "type": "server_error", "code": "engine_error"}}
        else:
            continue
        yield b"data: " + orjson.dumps(event) + b"\n\n"
        if message.kind in ("end", "error"):
            return


def listen(channel: Channel, request_id: str, timeout: float,
           silence: float) -> AsyncIterator[Message]:
    """Return the channel's frames for one request: the first within `timeout` (the wait for
    a worker), each later one within `silence` (the worker sends keepalives meanwhile).

    A stream whose worker goes silent after its first audio ends with ChannelTimeout, which
    aborts the response: the client sees a broken transfer, not a short clean one.
    """
    return channel.listen(request_id, timeout, silence)
