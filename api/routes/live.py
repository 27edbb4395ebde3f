"""`WS /v1/audio/speech/stream`: text streamed in as it is written, speech streamed out.

The protocol (PROTOCOL below is the API reference's section on it): a `session.config`
message, then `text.delta` messages of any size, `text.flush` to speak what is held without
waiting for a sentence to end, and `session.close` to finish. Completed sentences
(core/live_text.py) are spoken one after another, each as a streamed sync request on a
worker's realtime lane (never in this process), and their 16-bit PCM goes out as binary
frames between `sentence.start` and `sentence.end` events. A sentence goes to a worker as
soon as it is complete, up to AHEAD of the one whose audio is being sent, so the next one is
made while this one plays; its audio waits on its channel until its turn. A slow reader
holds up the forwarding, and so the reading of more text.
"""

import asyncio
import contextlib
import time
import uuid
from typing import Any, Literal

import anyio
import orjson
import structlog
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from api import client_secrets, streaming
from api.errors import ApiError, unavailable
from api.owned import named_lexicons, uploaded_voices
from api.schemas import ClientSecretBody, SpeechFields
from api.state import KEY_PROTOCOL, OwnerDep, State, StateDep, bearer, get_owner
from api.validation import resolve
from core import metrics
from core.channel import ChannelTimeout
from core.live_text import SentenceBuffer, estimated_words
from core.queues import SPEAK, model_queues
from core.text import strip_pauses

router = APIRouter()
log = structlog.get_logger()

POLICY, TOO_BIG, LOST, TRY_LATER = 1008, 1009, 1011, 1013  # WebSocket close codes
AHEAD = 3  # sentences sent to workers before their audio is forwarded
Sentences = asyncio.Queue[tuple[str, str] | None]  # (channel, sentence), in order

PROTOCOL = """\
`WS /v1/audio/speech/stream` speaks text as it arrives, as a voice agent sends an LLM's
tokens. Authenticate as every route does (`Authorization: Bearer <key>` on the upgrade
request); a browser, which cannot set that header, offers the subprotocols `narrator` and
`narrator.bearer.<key>` instead, and the server answers with `narrator`. So that a browser
never holds the key, a server that does asks `POST /v1/audio/speech/stream/client_secrets`
(body optional: `{"expires_after": {"seconds": 600}}`, 10 to 7,200) for `{"value":
"ek_...", "expires_at"}` and hands the browser the value, which it sends in the key's place
until it expires; it opens this WebSocket only, as the key that asked, and dies with that
key. The client sends JSON text frames:

- `{"type": "session.config", ...}`: first, once. `model`, `voice`, `speed`, `language`,
  `instructions`, `seed` and `lexicons` as `POST /v1/audio/speech` takes them, and
  `response_format`: `pcm` (the default) or `mp3` (Opus is not offered yet).
- `{"type": "text.delta", "text": "..."}`: more text, any size up to SYNC_MAX_CHARS. Each
  sentence is spoken as soon as it ends; one that runs past 200 characters gives up its
  clauses first.
- `{"type": "text.flush"}`: speak what is held now, ended or not.
- `{"type": "session.close"}`: speak what is held, send `done`, and close (1000).

The server sends, in order:

- `{"type": "session.ready", "model", "voice"}`: the configuration was taken.
- `{"type": "sentence.start", "index", "text", "start_seconds", "sample_rate"}`: a
  sentence's audio follows; where it starts in the session's audio, and its rate.
- binary frames: that sentence's audio, 16-bit little-endian mono PCM, or MP3 frames (64
  kbit/s mono, no tag frame). The MP3 frames of a session decode as one stream; each
  sentence's part of it starts about 50 ms (1,105 samples) before its speech and ends with
  LAME's padding, and the times in the events are those of the decoded stream.
- `{"type": "words", "index", "estimated", "words": [{"word", "start", "end"}]}`: its
  words' times in the session's audio. `estimated` false: where the engine put each word
  (Piper's phoneme durations); true: shared out by letter count (engines that do not report
  them, such as Qwen3-TTS, and sentences whose reading changed their word count).
- `{"type": "sentence.end", "index", "end_seconds"}`: its audio is all sent.
- `{"type": "done", "sentences", "characters", "audio_seconds"}`: after `session.close`.
- `{"type": "error", "error": {...}}`: OpenAI's error object; the socket then closes.

Close codes: 1000 after `done`; 1008 a bad or unauthenticated message, or a limit
(LIVE_MAX_CHARS in a session, LIVE_IDLE_SECONDS without a message, LIVE_SESSION_SECONDS
in all); 1009 a text frame over SYNC_MAX_CHARS; 1011 the engine failed or the worker went
silent mid-sentence (`worker_lost`); 1013 no worker took a sentence in time.
"""


class LiveConfig(SpeechFields):
    """`session.config`: the sync speech fields, and the audio's format."""

    type: Literal["session.config"]
    """The message's type."""
    response_format: Literal["pcm", "mp3"] = "pcm"
    """The audio sent: `pcm`, 16-bit little-endian mono; `mp3`, MPEG audio frames (64 kbit/s)
    that decode as one stream."""


class Closed(Exception):
    """The session ends: send `error` (if any) and close with `code`."""

    def __init__(self, code: int, error: ApiError | None = None) -> None:
        super().__init__(code)
        self.code, self.error = code, error


def _refuse(code: str, message: str, close: int) -> Closed:
    """The session ends on a client's mistake or a limit: an error, then `close`."""
    return Closed(close, ApiError(400, message, code=code))


@router.post("/v1/audio/speech/stream/client_secrets")
async def client_secret(request: Request, _owner: OwnerDep,
                        body: ClientSecretBody | None = None) -> dict[str, Any]:
    """A short-lived secret that opens `WS /v1/audio/speech/stream` as this key (for a
    browser, which should never hold the key): `{"value", "expires_at"}`."""
    expires_at = int(time.time()) + (body or ClientSecretBody()).expires_after.seconds
    return {"value": client_secrets.mint(bearer(request), expires_at),
            "expires_at": expires_at}


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(websocket: WebSocket, state: StateDep) -> None:
    """Speak text streamed in over a WebSocket (the protocol is in the API reference)."""
    offered = websocket.headers.get("sec-websocket-protocol", "")
    await websocket.accept(subprotocol="narrator" if KEY_PROTOCOL in offered else None)
    try:
        owner = await get_owner(websocket, state)
        config, payload = await _configure(websocket, state, owner)
        await websocket.send_json({"type": "session.ready", "model": payload["model"],
                                   "voice": payload["voice"]})
        await _session(websocket, state, config, payload)
    except Closed as closed:
        await _close(websocket, closed.code, closed.error)
    except ApiError as error:  # authentication, rate limits
        await _close(websocket, POLICY, error)
    except WebSocketDisconnect:
        return


async def _close(websocket: WebSocket, code: int, error: ApiError | None) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        if error is not None:
            await websocket.send_json({"type": "error", "error": {
                "message": error.message, "type": error.type, "param": error.param,
                "code": error.code}})
        await websocket.close(code, (error.message if error else "")[:120])


async def _receive(websocket: WebSocket, state: State, seconds: float) -> dict[str, Any]:
    """The client's next message, bounded in size and time."""
    try:
        with anyio.fail_after(seconds):
            text = await websocket.receive_text()
    except TimeoutError:
        raise _refuse("session_idle", f"no message for {seconds:g} s", POLICY) from None
    except KeyError:  # a binary frame
        raise _refuse("invalid_value", "messages are JSON text frames", POLICY) from None
    if len(text) > state.settings.sync_max_chars + 1024:
        raise _refuse("input_too_long", f"a message holds at most "
                     f"{state.settings.sync_max_chars} characters of text", TOO_BIG)
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _refuse("invalid_json", "a message is not JSON", POLICY) from None
    if not isinstance(message, dict):
        raise _refuse("invalid_value", "a message is a JSON object with a type", POLICY)
    return message


async def _configure(websocket: WebSocket, state: State, owner: str
                     ) -> tuple[LiveConfig, dict[str, Any]]:
    """Read `session.config`; return it and the sync request payload it makes."""
    message = await _receive(websocket, state, state.settings.live_idle_seconds)
    try:
        config = LiveConfig.model_validate(message)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise _refuse("invalid_value", f"session.config first: {where}: "
                     f"{exc.errors()[0]['msg']}", POLICY) from None
    try:
        models = await state.catalogue.models()
        async with state.sessions() as session:
            model, voice = resolve(config, models, await uploaded_voices(session, owner, models))
            _, lexicon = await named_lexicons(session, owner, config.lexicons, model)
    except ApiError as error:
        raise Closed(TRY_LATER if error.status_code == 503 else POLICY, error) from None
    payload = {"model": model.id, "voice": voice.id, "response_format": "pcm",
               "speed": config.speed, "stream": True, "words": True, **config.extras()} | (
        {"encoding": "mp3"} if config.response_format == "mp3" else {}) | (
        {"lexicon": lexicon} if lexicon else {})
    return config, payload


async def _session(websocket: WebSocket, state: State, config: LiveConfig,
                   payload: dict[str, Any]) -> None:
    """Read text and speak it side by side until `session.close`, a limit or a failure."""
    sentences: Sentences = asyncio.Queue()
    ahead = asyncio.Semaphore(AHEAD)
    totals = {"sentences": 0, "characters": 0, "samples": 0, "rate": 0}
    reader = asyncio.create_task(_read_all(
        websocket, state, SentenceBuffer(config.language or "en"), payload, sentences, ahead))
    speaker = asyncio.create_task(_speak_all(websocket, state, sentences, ahead, totals))
    try:  # the first failure of either ends the session; else the speaker finishes
        done, _ = await asyncio.wait({reader, speaker}, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
        await speaker
    finally:
        for task in (reader, speaker):
            task.cancel()
    rate = totals["rate"] or 1
    await websocket.send_json({"type": "done", "sentences": totals["sentences"],
                               "characters": totals["characters"],
                               "audio_seconds": round(totals["samples"] / rate, 3)})
    await websocket.close(1000)


async def _read_all(websocket: WebSocket, state: State, text: SentenceBuffer,
                    payload: dict[str, Any], sentences: Sentences,
                    ahead: asyncio.Semaphore) -> None:
    """Feed the client's text to the buffer; send each sentence it completes to a worker at
    once (at most AHEAD before their audio is forwarded: then reading waits, and so does a
    client that writes faster than speech is sent) and queue it; None ends the queue."""
    limits, taken = state.settings, 0
    deadline = time.monotonic() + limits.live_session_seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _refuse("session_too_long", f"a session lasts at most "
                         f"{limits.live_session_seconds:g} s", POLICY)
        message = await _receive(websocket, state, min(limits.live_idle_seconds, left))
        kind = message.get("type")
        if kind == "text.delta":
            delta = message.get("text")
            if not isinstance(delta, str):
                raise _refuse("invalid_value", "text.delta: `text` is a string", POLICY)
            if len(delta) > limits.sync_max_chars:
                raise _refuse("input_too_long", "text.delta: `text` holds at most "
                              f"{limits.sync_max_chars} characters", TOO_BIG)
            taken += len(delta)
            if taken > limits.live_max_chars:
                raise _refuse("input_too_long", f"a session takes at most "
                             f"{limits.live_max_chars} characters", POLICY)
            done = await anyio.to_thread.run_sync(text.feed, delta)  # pysbd: off the loop
        elif kind in ("text.flush", "session.close"):
            done = await anyio.to_thread.run_sync(text.flush)
        else:
            raise _refuse("invalid_value", f"unknown message type {kind!r}", POLICY)
        for sentence in done:
            spoken = strip_pauses(sentence).strip()
            if spoken:  # sent to a worker now; its audio waits on the channel until its turn
                await ahead.acquire()
                sentences.put_nowait((_dispatch(state, payload, spoken), spoken))
        if kind == "session.close":
            sentences.put_nowait(None)
            return


async def _speak_all(websocket: WebSocket, state: State, sentences: Sentences,
                     ahead: asyncio.Semaphore, totals: dict[str, int]) -> None:
    """Forward the queued sentences' audio in order until None."""
    while (item := await sentences.get()) is not None:
        await _forward(websocket, state, *item, totals)
        ahead.release()


def _dispatch(state: State, payload: dict[str, Any], sentence: str) -> str:
    """Send one sentence to a worker's realtime lane; return the channel its audio comes on."""
    request_id = f"live-{uuid.uuid4().hex}"
    metrics.live_sentences.labels(payload["model"]).inc()
    try:
        state.celery.send_task(SPEAK, args=[payload | {"request_id": request_id,
                                                       "input": sentence,
                                                       "sent_at": time.time()}],
                               queue=model_queues(payload["model"])[0],
                               expires=state.settings.sync_timeout_seconds)
    except Exception as exc:  # kombu's errors are many: any of them means no broker now
        raise Closed(TRY_LATER, unavailable(f"the broker is unreachable: {exc}")) from exc
    return request_id


async def _forward(websocket: WebSocket, state: State, request_id: str, sentence: str,
                   totals: dict[str, int]) -> None:
    """One sentence's frames, forwarded as they come, between its events.

    `totals["samples"]` is where the session's audio stands once decoded; an MP3 sentence
    takes more than its speech (the stream's delay before it, padding after), and its times
    are those of its speech."""
    timeout, silence = state.settings.sync_timeout_seconds, state.settings.sync_silence_seconds
    index, at, started, end = totals["sentences"], totals["samples"], False, {}
    delay, counted = 0, 0
    try:
        async for message in streaming.listen(state.channel, request_id, timeout, silence):
            if message.kind == "error":
                raise Closed(LOST, streaming.engine_error(message))
            if not started and message.kind in ("meta", "data"):
                rate = int(message.meta.get("sample_rate") or totals["rate"])
                delay = int(message.meta.get("delay") or 0)
                totals["rate"], started = rate, True
                await websocket.send_json({"type": "sentence.start", "index": index,
                                           "text": sentence, "sample_rate": rate,
                                           "start_seconds": round((at + delay) / rate, 3)})
            if message.kind == "data":
                await websocket.send_bytes(message.data)
                counted += len(message.data) // 2  # PCM's samples (MP3's are in `end`)
            elif message.kind == "end":
                end = message.meta
                break
    except ChannelTimeout:
        raise (Closed(LOST, streaming.worker_lost(silence)) if started
               else Closed(TRY_LATER, streaming.no_worker(timeout))) from None
    speech = int(end.get("samples", counted))
    totals["samples"] = at + int(end.get("stream_samples", speech))
    totals["sentences"] += 1
    totals["characters"] += len(sentence)
    rate = totals["rate"] or 1
    await websocket.send_json(_words(index, sentence, (at + delay) / rate, speech / rate,
                                     end.get("words")))
    await websocket.send_json({"type": "sentence.end", "index": index,
                               "end_seconds": round((at + delay + speech) / rate, 3)})


def _words(index: int, sentence: str, start: float, seconds: float,
           timed: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The `words` event of a sentence that starts at `start` in the session's audio: the
    engine's word times where it gave one per word of the sentence as written (Piper's
    durations; not where reading changed the word count, "1984" read "nineteen eighty-four"),
    else times shared out by letter count, marked `estimated`."""
    written = sentence.split()
    if timed and len(timed) == len(written):
        return {"type": "words", "index": index, "estimated": False, "words": [
            {"word": word, "start": round(start + t["start"], 3),
             "end": round(start + t["end"], 3)} for word, t in zip(written, timed, strict=True)]}
    return {"type": "words", "index": index, "estimated": True,
            "words": estimated_words(sentence, start, seconds)}
