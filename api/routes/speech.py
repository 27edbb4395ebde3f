"""`POST /v1/audio/speech`: OpenAI-compatible sync speech through the realtime queue."""

import time

import structlog
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from api import streaming
from api.errors import ApiError, bad_request, unavailable
from api.owned import named_lexicons, uploaded_voices
from api.schemas import SpeechBody
from api.state import OwnerDep, SessionDep, State, StateDep
from api.validation import check_script, resolve, text_field
from core import metrics
from core.channel import ChannelTimeout
from core.marking import Provenance
from core.queues import SPEAK, model_queues
from core.text import strip_pauses

router = APIRouter()
log = structlog.get_logger()


@router.post("/v1/audio/speech", response_class=Response,
             responses={200: {"content": {"audio/mpeg": {}}}})
async def create_speech(body: SpeechBody, request: Request, state: StateDep,
                        session: SessionDep, owner: OwnerDep) -> Response:
    """Speak `input` and return the audio bytes."""
    started = time.perf_counter()
    models = await state.catalogue.models()
    model, voice = resolve(body, models, await uploaded_voices(session, owner, models))
    limit = state.settings.sync_max_chars
    text = strip_pauses(text_field(body.input, "input", limit,
                                   "send long text as an async job: POST /v1/audio/jobs"))
    check_script(model, text, body.language)
    streamed = body.stream_format is not None
    allowed = ("pcm",) if body.stream_format == "sse" else ("pcm", "wav")
    if streamed and body.response_format not in allowed:
        raise bad_request(f"response_format: streaming with stream_format "
                          f"'{body.stream_format}' sends {' or '.join(allowed)}, not "
                          f"'{body.response_format}'", "response_format",
                          "unsupported_parameter")
    _, lexicon = await named_lexicons(session, owner, body.lexicons, model)
    await session.close()  # its connection back to the pool: the answer may take a minute
    request_id: str = request.state.request_id  # api.observability: also the channel's name
    payload = {"request_id": request_id, "input": text, "model": model.id, "voice": voice.id,
               "response_format": body.response_format, "speed": body.speed,
               "stream": streamed, "sent_at": time.time(), **body.extras()} | (
        {"lexicon": lexicon} if lexicon else {})
    timeout = state.settings.sync_timeout_seconds
    try:
        state.celery.send_task(SPEAK, args=[payload],
                               queue=model_queues(model.id)[0], expires=timeout)
    except Exception as exc:
        raise unavailable(f"the broker is unreachable: {exc}") from exc
    if streamed:
        made = Provenance(model.id, voice.id) if state.settings.mark_output else None
        return await _stream(body, state, request_id, len(text), model.id, started, made)
    silence = state.settings.sync_silence_seconds
    started_work = False  # the first frame says a worker took the request
    try:
        async for message in streaming.listen(state.channel, request_id, timeout, silence):
            started_work = True
            if message.kind == "error":
                raise ApiError(500, f"the engine failed: {message.meta.get('message')}",
                               type="server_error", code="engine_error")
            if message.kind == "end":
                metrics.first_chunk.labels(model.id, "false").observe(
                    time.perf_counter() - started)
                return Response(message.data, media_type=message.meta["content_type"],
                                headers={"X-Audio-Duration": f"{message.meta['duration']:.3f}",
                                         "X-Sample-Rate": str(message.meta["sample_rate"])})
    except ChannelTimeout as exc:
        raise (streaming.worker_lost(silence) if started_work
               else streaming.no_worker(timeout)) from exc
    raise unavailable("the worker closed the request without audio")


async def _stream(body: SpeechBody, state: State, request_id: str, characters: int,
                  model: str, started: float, made: Provenance | None) -> StreamingResponse:
    timeout = state.settings.sync_timeout_seconds
    frames = streaming.listen(state.channel, request_id, timeout,
                              state.settings.sync_silence_seconds)
    meta = await streaming.first_frame(frames, timeout)
    def first_audio() -> None:
        seconds = time.perf_counter() - started
        metrics.first_chunk.labels(model, "true").observe(seconds)
        log.info("speech.first_audio", ms=round(seconds * 1000, 1))  # the worker's part: its log

    frames = streaming.on_first_audio(frames, first_audio)
    rate = int(meta.meta["sample_rate"])
    headers = {"X-Sample-Rate": str(rate)}
    if body.stream_format == "sse":
        return StreamingResponse(streaming.sse_body(frames, characters),
                                 media_type="text/event-stream", headers=headers)
    wav = body.response_format == "wav"
    return StreamingResponse(
        streaming.pcm_body(frames, streaming.wav_header(rate, made) if wav else b""),
        media_type="audio/wav" if wav else "audio/pcm", headers=headers)
