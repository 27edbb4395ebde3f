"""The sync path on the worker side: speak one request and answer on its channel."""

import threading
import time
from typing import Any

import structlog

from core import metrics
from core.audio import CONTENT_TYPES, encode, to_pcm16
from core.channel import Channel, Message, channel_for
from core.normalize import spoken
from core.registry import worker_id
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


class Pulse:
    """One request's frames, published one at a time, and an `alive` frame every `every` s
    from the first frame to the last, so the API can tell a slow worker from a dead one.

    One lock orders every frame of the request: the file channel numbers frames by count.
    """

    def __init__(self, channel: Channel, request_id: str, every: float) -> None:
        self.channel, self.request_id, self.every = channel, request_id, every
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="sync-keepalive", daemon=True)

    def start(self, first: Message) -> None:
        """Publish the first frame, then keep the request alive."""
        self.publish(first)
        self._thread.start()

    def publish(self, message: Message) -> None:
        """Publish one frame (never after `finish`)."""
        with self._lock:
            if not self._done.is_set():
                self.channel.publish(self.request_id, message)

    def finish(self, message: Message) -> None:
        """Stop the keepalive, then publish the last frame (end or error)."""
        with self._lock:
            self._done.set()
            self.channel.publish(self.request_id, message)

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            try:
                self.publish(Message("alive"))
            except Exception:  # the next beat tries again; the API waits out the silence
                log.warning("speech.keepalive_failed", request_id=self.request_id,
                            exc_info=True)


def _pulse(request_id: str) -> Pulse:
    settings = get_settings()
    return Pulse(channel_for(settings), request_id, settings.sync_keepalive_seconds)


def stream(payload: dict[str, Any]) -> None:
    """Publish 16-bit PCM chunks as the engine makes them, then the total duration."""
    request_id = payload["request_id"]
    pulse = _pulse(request_id)
    samples = 0
    started = time.perf_counter()
    try:
        engine = get_engine()
        pulse.start(Message("meta", {"sample_rate": engine.sample_rate, "worker": worker_id()}))
        for chunk in engine.stream(_request(payload)):
            samples += len(chunk)
            pulse.publish(Message("data", data=to_pcm16(chunk)))
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        pulse.finish(Message("error", {"message": str(exc)[:500]}))
        return
    seconds = samples / engine.sample_rate
    metrics.observe_synthesis(engine.info.id, time.perf_counter() - started, seconds, "sync")
    pulse.finish(Message("end", {"duration": seconds}))
    log.info("speech.streamed", request_id=request_id, seconds=round(seconds, 3))


def speak(payload: dict[str, Any]) -> None:
    """Synthesise `payload` and publish the encoded audio (or the error) on its channel."""
    if payload.get("stream"):
        stream(payload)
        return
    request_id = payload["request_id"]
    pulse = _pulse(request_id)
    try:
        pulse.start(Message("alive", {"worker": worker_id()}))
        engine = get_engine()
        started = time.perf_counter()
        audio = engine.synthesize([_request(payload)])[0]
        metrics.observe_synthesis(engine.info.id, time.perf_counter() - started,
                                  len(audio) / engine.sample_rate, "sync")
        fmt = payload["response_format"]
        data = encode(audio, engine.sample_rate, fmt)
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        pulse.finish(Message("error", {"message": str(exc)[:500]}))
        return
    meta: dict[str, Any] = {"sample_rate": engine.sample_rate,
                            "duration": len(audio) / engine.sample_rate,
                            "content_type": CONTENT_TYPES[fmt]}
    pulse.finish(Message("end", meta, data))
    log.info("speech.done", request_id=request_id, seconds=round(meta["duration"], 3))
