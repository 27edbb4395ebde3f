"""The sync path on the worker side: speak one request and answer on its channel."""

import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from core import metrics, tracing
from core.audio import CONTENT_TYPES, encode, to_pcm16
from core.channel import Channel, Message, channel_for
from core.lexicon import reader_for
from core.marking import Provenance
from core.registry import worker_id
from core.text import clauses, clean, paragraphs, sentences
from workers.engines import Audio, Engine, SpeechRequest
from workers.provenance import mark_answer
from workers.runtime.engine import realtime_engine
from workers.settings import get_settings

if TYPE_CHECKING:
    from core.mp3_stream import Mp3Stream

log = structlog.get_logger()
CLAUSE_CHARS = 84  # a sentence longer than this speaks in clauses when few are asked
CLAUSE_GAP = 0.4  # of the sentence gap, between the clauses of one long sentence
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s*$")


def groups(text: str, language: str | None, most: int) -> list[str]:
    """Split `text` at sentence ends into at most `most` pieces of similar length; with fewer
    sentences than that, sentences over CLAUSE_CHARS also split after their commas,
    semicolons, colons and dashes (a piece is spoken in as many engine steps as it has
    frames: a long sentence alone is the slowest answer)."""
    if most <= 1:
        return [text]
    found = [s for p in paragraphs(clean(text)) for s in sentences(p, language or "en")]
    if len(found) < most:
        found = [c for sentence in found for c in clauses(sentence, CLAUSE_CHARS)]
    if len(found) <= 1:
        return [text]
    target = sum(map(len, found)) / min(most, len(found))
    pieces: list[list[str]] = [[]]
    for sentence in found:
        size = sum(map(len, pieces[-1]))
        if pieces[-1] and size + len(sentence) > target and len(pieces) < most:
            pieces.append([])
        pieces[-1].append(sentence)
    return [" ".join(piece) for piece in pieces]


def requests_for(payload: dict[str, Any]) -> list[SpeechRequest]:
    """Return the engine requests of one sync request: its sentences in pieces (vLLM-Omni
    speaks them at once), each with its share of `max_new_tokens` by length."""
    settings = get_settings()
    language, cap = payload.get("language"), payload.get("max_new_tokens")
    texts = groups(payload["input"], language, settings.sync_piece_limit)
    total = sum(map(len, texts))
    say, out = reader_for(payload, settings.normalize_text), []
    for n, text in enumerate(texts):
        share = cap if cap is None or len(texts) == 1 else max(1, round(cap * len(text) / total))
        out.append(SpeechRequest(
            text=say(text),
            voice=payload["voice"], speed=payload.get("speed", 1.0),
            instructions=payload.get("instructions"), language=language,
            seed=payload.get("seed"), max_new_tokens=share, task_type=payload.get("task_type"),
            request_id=payload["request_id"] + (f".{n}" if len(texts) > 1 else ""),
            realtime=True))
    return out


def _gap(engine: Engine, before: str) -> Audio:
    """Return the silence after the piece `before`: the sentence gap, or after a clause
    (a piece that ends without a sentence's full stop) CLAUSE_GAP of it."""
    seconds = get_settings().sentence_gap_seconds
    if not _SENTENCE_END.search(before):
        seconds *= CLAUSE_GAP
    return np.zeros(int(seconds * engine.sample_rate), dtype=np.float32)


def _pieces_streamed(engine: Engine, requests: list[SpeechRequest]) -> Iterator[Audio]:
    """Yield the pieces' chunks in order; GPU engines start every piece at once (their
    `stream` submits at the call), so later pieces are ready when the first one ends."""
    streams = [engine.stream(r) for r in requests]
    for n, chunks in enumerate(streams):
        if n:
            yield _gap(engine, requests[n - 1].text)
        yield from chunks


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


def _mp3(payload: dict[str, Any], rate: int) -> "Mp3Stream | None":
    """The MP3 encoder of a request that asks `encoding` mp3 (PyAV, imported then)."""
    if payload.get("encoding") != "mp3":
        return None
    from core.mp3_stream import Mp3Stream

    return Mp3Stream(rate)


def _timed(engine: Engine, requests: list[SpeechRequest]) -> tuple[Audio, list[Any]] | None:
    """One piece spoken whole with its words' times from the engine (seconds from its
    start), where the engine gives them (Piper's durations); else None."""
    speak = getattr(engine, "synthesize_words", None)
    if speak is None or len(requests) != 1:
        return None
    (audio, words), = speak(requests)
    rate = engine.sample_rate
    return audio, [{"word": w.word, "start": round(w.start / rate, 3),
                    "end": round(w.end / rate, 3)} for w in words or ()]


def stream(payload: dict[str, Any]) -> None:
    """Publish 16-bit PCM chunks as the engine makes them (or, with `encoding` mp3, the MP3
    frames they complete: core/mp3_stream.py), then the total duration and samples (and,
    asked `words` of an engine that gives them, the words' times)."""
    request_id = payload["request_id"]
    pulse = _pulse(request_id)
    samples = 0
    started = time.perf_counter()
    sent_at = payload.get("sent_at")  # the API's clock: one host's, in a bench
    try:
        engine = realtime_engine()
        mp3 = _mp3(payload, engine.sample_rate)
        pulse.start(Message("meta", {"sample_rate": engine.sample_rate, "worker": worker_id(),
                                     "delay": mp3.delay if mp3 else 0}))
        requests = requests_for(payload)
        asked = time.perf_counter()
        timed = _timed(engine, requests) if payload.get("words") else None
        with tracing.span("engine.stream", model=engine.info.id, pieces=len(requests)):
            for chunk in [timed[0]] if timed else _pieces_streamed(engine, requests):
                if not samples:  # where a first chunk's time goes, before the engine and in it
                    log.info("speech.first_chunk", engine_ms=round(
                        (time.perf_counter() - asked) * 1000, 1), waited_ms=round(
                        (time.time() - sent_at) * 1000 - (time.perf_counter() - started) * 1000,
                        1) if sent_at else None, pieces=len(requests))
                samples += len(chunk)
                data = mp3.add(chunk) if mp3 else to_pcm16(chunk)
                if data:
                    pulse.publish(Message("data", data=data))
        if mp3 and (tail := mp3.close()):
            pulse.publish(Message("data", data=tail))
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        pulse.finish(Message("error", {"message": str(exc)[:500]}))
        return
    seconds = samples / engine.sample_rate
    metrics.observe_synthesis(engine.info.id, time.perf_counter() - started, seconds, "sync")
    pulse.finish(Message("end", {"duration": seconds, "samples": samples}
                         | ({"stream_samples": mp3.samples} if mp3 else {})
                         | ({"words": timed[1]} if timed else {})))
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
        engine = realtime_engine()
        started = time.perf_counter()
        requests = requests_for(payload)
        with tracing.span("engine.synthesize", model=engine.info.id, pieces=len(requests)):
            pieces = engine.synthesize(requests)
        audio = np.concatenate([part for n, piece in enumerate(pieces) for part in (
            (_gap(engine, requests[n - 1].text), piece) if n else (piece,))])
        metrics.observe_synthesis(engine.info.id, time.perf_counter() - started,
                                  len(audio) / engine.sample_rate, "sync")
        fmt = payload["response_format"]
        data = encode(audio, engine.sample_rate, fmt)
        data = mark_answer(data, fmt, Provenance(engine.info.id, payload["voice"]))
    except Exception as exc:
        log.exception("speech.failed", request_id=request_id)
        pulse.finish(Message("error", {"message": str(exc)[:500]}))
        return
    meta: dict[str, Any] = {"sample_rate": engine.sample_rate,
                            "duration": len(audio) / engine.sample_rate,
                            "content_type": CONTENT_TYPES[fmt]}
    pulse.finish(Message("end", meta, data))
    log.info("speech.done", request_id=request_id, seconds=round(meta["duration"], 3))
