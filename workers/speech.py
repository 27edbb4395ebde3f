"""The sync path on the worker side: speak one request and answer on its channel."""

import time
from typing import Any

import structlog

from core import metrics
from core.audio import CONTENT_TYPES, encode, to_pcm16
from core.channel import Message, channel_for
from core.normalize import spoken
from workers.engine import get_engine
from workers.engines import SpeechRequest
from workers.settings import get_settings

log = structlog.get_logger()


def _request(payload: dict[str, Any]) -> SpeechRequest:
    text = payload["input"]
    if get_settings().normalize_text:
        text = spoken(text, payload.get("language"))
    return SpeechRequest(
        text=text, voice=payload["voice"], speed=payload.get("speed", 1.0),
        instructions=payload.get("instructions"), language=payload.get("language"),
        seed=payload.get("seed"), max_new_tokens=payload.get("max_new_tokens"),
        task_type=payload.get("task_type"), request_id=payload["request_id"], realtime=True,
    )


def stream(payload: dict[str, Any]) -> None:
    """Publish 16-bit PCM chunks as the engine makes them, then the total duration."""
    request_id = payload["request_id"]
    channel = channel_for(get_settings())
    samples = 0
    started = time.perf_counter()
    try:
        engine = get_engine()
        channel.publish(request_id, Message("meta", {"sample_rate": engine.sample_rate}))
        for chunk in engine.stream(_request(payload)):
            samples += len(chunk)
            channel.publish(request_id, Message("data", data=to_pcm16(chunk)))
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        channel.publish(request_id, Message("error", {"message": str(exc)[:500]}))
        return
    seconds = samples / engine.sample_rate
    metrics.observe_synthesis(engine.info.id, time.perf_counter() - started, seconds, "sync")
    channel.publish(request_id, Message("end", {"duration": seconds}))
    log.info("speech.streamed", request_id=request_id, seconds=round(seconds, 3))


def speak(payload: dict[str, Any]) -> None:
    """Synthesise `payload` and publish the encoded audio (or the error) on its channel."""
    if payload.get("stream"):
        stream(payload)
        return
    request_id = payload["request_id"]
    channel = channel_for(get_settings())
    try:
        engine = get_engine()
        started = time.perf_counter()
        audio = engine.synthesize([_request(payload)])[0]
        metrics.observe_synthesis(engine.info.id, time.perf_counter() - started,
                                  len(audio) / engine.sample_rate, "sync")
        fmt = payload["response_format"]
        data = encode(audio, engine.sample_rate, fmt)
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        channel.publish(request_id, Message("error", {"message": str(exc)[:500]}))
        return
    meta: dict[str, Any] = {"sample_rate": engine.sample_rate,
                            "duration": len(audio) / engine.sample_rate,
                            "content_type": CONTENT_TYPES[fmt]}
    channel.publish(request_id, Message("end", meta, data))
    log.info("speech.done", request_id=request_id, seconds=round(meta["duration"], 3))
