"""`WS /v1/audio/speech/stream` against real API and worker processes (Postgres, Redis,
Piper): text sent in small deltas comes back as each sentence's PCM, in order, between its
events; flush speaks what does not end; a client that stops reading holds synthesis back;
keys, bad messages and limits close the socket with an error and a close code."""

import io
import json
import socket
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from api import client_secrets
from api.routes.live import AHEAD
from core.live_text import SentenceBuffer, estimated_words
from tests.support import Stack

TEXT = ("The boats came in at dawn. Gulls followed them over the water, calling. "
        "By noon the market was full! Was it ever this busy before? ")


def _ws(stack: Stack, **headers: str) -> ClientConnection:
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    return connect(url, additional_headers=headers, open_timeout=30, max_size=None)


def _events(ws: ClientConnection, events: list[dict[str, Any]] | None = None
            ) -> tuple[list[dict[str, Any]], dict[int, bytes]]:
    """Everything the server sends until it closes (after `events`, those read already):
    events, and the audio of each sentence."""
    events = list(events or [])
    audio: dict[int, bytes] = {}
    try:
        while True:
            frame = ws.recv(timeout=120)
            if isinstance(frame, bytes):
                assert events[-1]["type"] == "sentence.start"  # audio only inside a sentence
                index = events[-1]["index"]
                audio[index] = audio.get(index, b"") + frame
            else:
                events.append(json.loads(frame))
    except ConnectionClosed:
        return events, audio


def test_text_in_deltas_comes_back_sentence_by_sentence(local_stack: Stack) -> None:
    with _ws(local_stack) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "joe"}))
        for at in range(0, len(TEXT), 7):  # as an LLM writes it, a few characters at a time
            ws.send(json.dumps({"type": "text.delta", "text": TEXT[at:at + 7]}))
        ws.send(json.dumps({"type": "text.delta", "text": "And one more without an end"}))
        ws.send(json.dumps({"type": "session.close"}))
        events, audio = _events(ws)
        assert ws.close_code == 1000
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.ready"
    assert kinds[-1] == "done"
    starts = [e for e in events if e["type"] == "sentence.start"]
    ends = [e for e in events if e["type"] == "sentence.end"]
    assert [e["text"] for e in starts] == [
        "The boats came in at dawn.", "Gulls followed them over the water, calling.",
        "By noon the market was full!", "Was it ever this busy before?",
        "And one more without an end"]
    assert [e["index"] for e in starts] == [e["index"] for e in ends] == list(range(5))
    rate = starts[0]["sample_rate"]
    assert rate == 22050
    position = 0.0
    for start, end in zip(starts, ends, strict=True):  # each sentence where the last ended
        assert start["start_seconds"] == pytest.approx(position, abs=0.002)
        seconds = len(audio[start["index"]]) / 2 / rate
        assert seconds > 0.5
        assert end["end_seconds"] == pytest.approx(position + seconds, abs=0.002)
        position = end["end_seconds"]
    words = [e for e in events if e["type"] == "words"]
    assert [e["index"] for e in words] == list(range(5))
    for word_event, start, end in zip(words, starts, ends, strict=True):
        assert word_event["estimated"] is False  # Piper's own durations
        assert " ".join(w["word"] for w in word_event["words"]) == start["text"]
        times = [t for w in word_event["words"] for t in (w["start"], w["end"])]
        assert times == sorted(times)
        assert start["start_seconds"] <= times[0] < times[-1] <= end["end_seconds"] + 0.002
        shared = estimated_words(start["text"], start["start_seconds"],
                                 end["end_seconds"] - start["start_seconds"])
        assert max(abs(w["start"] - e["start"]) for w, e in zip(  # not letter counts
            word_event["words"], shared, strict=True)) > 0.02
    done = events[-1]
    assert done["sentences"] == 5
    assert done["audio_seconds"] == pytest.approx(position, abs=0.002)
    assert done["characters"] == sum(len(e["text"]) for e in starts)


def test_mp3_sentences_decode_as_one_stream_where_the_events_say(local_stack: Stack) -> None:
    """MP3 out: the frames of all sentences decode as one stream of the length `done` gives,
    and each sentence's speech lies between its start and end times, with the encoder's
    near-silent delay before it."""
    import av
    import numpy as np

    with _ws(local_stack) as ws:
        ws.send(json.dumps({"type": "session.config", "response_format": "mp3"}))
        ws.send(json.dumps({"type": "text.delta", "text": TEXT}))
        ws.send(json.dumps({"type": "session.close"}))
        events, audio = _events(ws)
        assert ws.close_code == 1000
    stream = b"".join(audio[n] for n in sorted(audio))
    with av.open(io.BytesIO(stream), mode="r", format="mp3") as container:
        decoded = np.concatenate([frame.to_ndarray().reshape(-1)
                                  for frame in container.decode(container.streams.audio[0])])
    starts = [e for e in events if e["type"] == "sentence.start"]
    ends = [e for e in events if e["type"] == "sentence.end"]
    rate = starts[0]["sample_rate"]
    assert len(starts) == 4
    assert len(stream) < 0.3 * len(decoded) * 2  # well under 16-bit PCM's size
    assert len(decoded) / rate == pytest.approx(events[-1]["audio_seconds"], abs=0.001)

    def loudness(first: float, last: float) -> float:
        part = decoded[int(first * rate):int(last * rate)]
        return float(np.sqrt(np.mean(part ** 2)))

    for start, end in zip(starts, ends, strict=True):
        speech = loudness(start["start_seconds"], end["end_seconds"])
        assert speech > 0.02
        assert loudness(start["start_seconds"] - 0.045, start["start_seconds"]) < speech / 10
    for end, start in zip(ends, starts[1:], strict=False):
        assert end["end_seconds"] < start["start_seconds"]


def test_flush_speaks_what_does_not_end(local_stack: Stack) -> None:
    with _ws(local_stack) as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.send(json.dumps({"type": "text.delta", "text": "Mister Smith is"}))
        ws.send(json.dumps({"type": "text.flush"}))
        first = [json.loads(ws.recv(timeout=60)) for _ in range(2)]
        assert [e["type"] for e in first] == ["session.ready", "sentence.start"]
        assert first[1]["text"] == "Mister Smith is"
        ws.send(json.dumps({"type": "session.close"}))
        events, _ = _events(ws, first)
    assert events[-1]["type"] == "done"
    assert events[-1]["sentences"] == 1


@pytest.mark.parametrize(("messages", "code", "error"), [
    ([{"type": "text.delta", "text": "No config first."}], 1008, "invalid_value"),
    ([{"type": "session.config", "voice": "nobody"}], 1008, "voice_not_found"),
    ([{"type": "session.config", "response_format": "opus"}], 1008, "invalid_value"),
    ([{"type": "session.config"}, {"type": "text.delta", "text": "x" * 5000}], 1009,
     "input_too_long"),
    ([{"type": "session.config"}, {"type": "dance"}], 1008, "invalid_value"),
    (["not json"], 1008, "invalid_json"),
])
def test_bad_messages_end_the_session_with_an_error(local_stack: Stack,
                                                    messages: list[Any], code: int,
                                                    error: str) -> None:
    with _ws(local_stack) as ws:
        for message in messages:
            ws.send(message if isinstance(message, str) else json.dumps(message))
        events, _ = _events(ws)
        assert ws.close_code == code
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == error


def _sentences_sent(stack: Stack) -> float:
    """The API's count of live sentences sent to workers (narrator_live_sentences_total)."""
    families = text_string_to_metric_families(httpx.get(f"{stack.url}/metrics").text)
    return sum(sample.value for family in families if family.name == "narrator_live_sentences"
               for sample in family.samples if sample.name.endswith("_total"))


def test_a_slow_reader_slows_synthesis_and_loses_nothing(local_stack: Stack) -> None:
    """A client that stops reading: its socket's buffers fill, the server's send waits, and
    no more than AHEAD sentences past the one being sent go to workers (plus what the
    buffers took), however much text it has; once it reads again, every sentence comes, in
    order."""
    text = " ".join(f"Sentence number {n} runs on for a little while, so that its audio "
                    "takes up some room in the buffers." for n in range(40))
    host, port = urlsplit(local_stack.url).hostname, urlsplit(local_stack.url).port
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    sock.connect((host, port))
    before = _sentences_sent(local_stack)
    with connect(local_stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream",
                 sock=sock, max_queue=1, max_size=None, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.send(json.dumps({"type": "text.delta", "text": text}))
        ws.send(json.dumps({"type": "session.close"}))
        time.sleep(8)  # not reading: Piper makes a sentence in well under a second
        stalled = _sentences_sent(local_stack) - before
        time.sleep(4)
        assert _sentences_sent(local_stack) - before == stalled  # held, not creeping on
        events, audio = _events(ws)
        assert ws.close_code == 1000
    # Held by the kernel: the server's socket buffer (at most tcp_wmem's largest) and the
    # client's (4 KB asked); the API itself holds AHEAD sentences and the one it is sending.
    kernel = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2]) + 65536
    held = -(-kernel // min(len(a) for a in audio.values()))  # whole sentences, rounded up
    assert AHEAD < stalled <= AHEAD + 1 + held
    assert stalled < 40
    starts = [e for e in events if e["type"] == "sentence.start"]
    assert [e["text"] for e in starts] == [
        f"Sentence number {n} runs on for a little while, so that its audio takes up some "
        "room in the buffers." for n in range(40)]
    assert all(len(audio[n]) / 2 / 22050 > 2 for n in range(40))
    assert events[-1]["sentences"] == 40
    assert _sentences_sent(local_stack) - before == 40


@pytest.fixture(scope="module")
def keyed_stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Any:
    import redis

    from tests.conftest import base_env, redis_url
    from tests.support import start_stack

    redis.Redis.from_url(redis_url(8)).flushdb()
    tmp = tmp_path_factory.mktemp("live-keyed")
    stack = start_stack(tmp, base_env(tmp, database_url, 8) | {"NARRATOR_API_KEYS": "sesame"})
    yield stack
    stack.stop()


def test_a_keyed_server_wants_the_key(keyed_stack: Stack) -> None:
    with _ws(keyed_stack) as ws:
        events, _ = _events(ws)
        assert ws.close_code == 1008
    assert events[-1]["error"]["code"] == "missing_api_key"
    with _ws(keyed_stack, Authorization="Bearer sesame") as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.send(json.dumps({"type": "text.delta", "text": "With the key. "}))
        ws.send(json.dumps({"type": "session.close"}))
        events, audio = _events(ws)
        assert ws.close_code == 1000
    assert events[-1] == {"type": "done", "sentences": 1, "characters": 13,
                          "audio_seconds": pytest.approx(len(audio[0]) / 2 / 22050, abs=0.002)}


def _spoken_with(stack: Stack, secret: str) -> tuple[int | None, list[dict[str, Any]]]:
    """Open a session as a browser does, with `secret` as a subprotocol; say one sentence."""
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url, subprotocols=[Subprotocol("narrator"),
                                    Subprotocol(f"narrator.bearer.{secret}")],
                 open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.send(json.dumps({"type": "text.delta", "text": "With a secret. "}))
        ws.send(json.dumps({"type": "session.close"}))
        events, _ = _events(ws)
        return ws.close_code, events


def test_a_client_secret_opens_the_socket_for_a_while_and_nothing_else(
        keyed_stack: Stack) -> None:
    made = httpx.post(f"{keyed_stack.url}/v1/audio/speech/stream/client_secrets",
                      headers={"Authorization": "Bearer sesame"},
                      json={"expires_after": {"seconds": 60}})
    assert made.status_code == 200
    secret = made.json()["value"]
    assert secret.startswith("ek_")
    assert "sesame" not in secret
    assert made.json()["expires_at"] == pytest.approx(time.time() + 60, abs=5)
    code, events = _spoken_with(keyed_stack, secret)
    assert code == 1000
    assert events[-1]["type"] == "done"
    # Not a key: no other route takes it, and no secret makes another.
    for method, path in (("GET", "/v1/audio/jobs"),
                         ("POST", "/v1/audio/speech/stream/client_secrets")):
        answer = httpx.request(method, keyed_stack.url + path,
                               headers={"Authorization": f"Bearer {secret}"})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "invalid_api_key"
    # Expired, tampered with, or from a key the server does not hold: refused.
    owner, expires_at, mac = secret.removeprefix("ek_").split(".")
    for bad in (client_secrets.mint("sesame", int(time.time()) - 1),
                f"ek_{owner}.{int(expires_at) + 3600}.{mac}",
                client_secrets.mint("not-a-key", int(time.time()) + 60)):
        code, events = _spoken_with(keyed_stack, bad)
        assert code == 1008
        assert events[-1]["error"]["code"] == "invalid_api_key"
    for seconds in (5, 7201):
        assert httpx.post(f"{keyed_stack.url}/v1/audio/speech/stream/client_secrets",
                          headers={"Authorization": "Bearer sesame"},
                          json={"expires_after": {"seconds": seconds}}).status_code == 400


def test_the_sentence_buffer_waits_for_what_ends_a_sentence() -> None:
    text = SentenceBuffer()
    assert text.feed("Hello there. Mr. ") == ["Hello there."]  # "Mr. " may go on
    assert text.feed("Smith came. ") == ["Mr. Smith came."]
    assert text.feed("No end yet") == []
    assert text.flush() == ["No end yet"]
    long = SentenceBuffer(long=40)
    assert long.feed("It went on, and on, and on, and on without a stop, and then") == [
        "It went on, and on, and on,"]  # clauses packed to 40 characters; the last waits
    assert long.flush() == ["and on without a stop, and then"]
    words = SentenceBuffer(long=40, most=60)
    cut = words.feed("word " * 30)  # no clause breaks: cut between words past `most`
    assert cut
    assert all(len(piece) <= 60 for piece in cut)
    assert " ".join(cut + words.flush()).split() == ["word"] * 30


def test_the_clients_speak_live(local_stack: Stack) -> None:
    """Narrator.speak_live and AsyncNarrator.speak_live: tokens in, audio and events out."""
    import asyncio

    from narrator.client import AsyncNarrator, BadRequest, Narrator

    tokens = ["The boats ", "came in ", "at dawn. ", "Gulls ", "followed them."]
    with Narrator(local_stack.url) as tts:
        pieces = list(tts.speak_live(iter(tokens), voice="joe"))
        with pytest.raises(BadRequest) as refused:
            list(tts.speak_live(["Hello."], voice="nobody"))
    assert refused.value.code == "voice_not_found"
    events = [p for p in pieces if isinstance(p, dict)]
    audio = b"".join(p for p in pieces if isinstance(p, bytes))
    assert [e["text"] for e in events if e["type"] == "sentence.start"] == [
        "The boats came in at dawn.", "Gulls followed them."]
    assert events[-1]["type"] == "done"
    assert events[-1]["audio_seconds"] == pytest.approx(len(audio) / 2 / 22050, abs=0.002)

    async def tokens_as_written() -> Any:
        for token in tokens:
            await asyncio.sleep(0.03)
            yield token

    async def speak() -> list[Any]:
        async with AsyncNarrator(local_stack.url) as tts:
            return [p async for p in tts.speak_live(tokens_as_written())]

    sent = asyncio.run(speak())
    assert [p["type"] for p in sent if isinstance(p, dict)][-1] == "done"
    assert sum(len(p) for p in sent if isinstance(p, bytes)) > 22050  # over half a second


def test_word_times_are_estimated_where_the_reading_changed_the_word_count() -> None:
    from api.routes.live import _words

    spoken = [{"word": w, "start": 0.1 * n, "end": 0.1 * n + 0.08}
              for n, w in enumerate(["In", "nineteen", "eighty-four", "it", "rained."])]
    event = _words(2, "In 1984 it rained.", 10.0, 2.0, spoken)
    assert event["estimated"] is True
    assert [w["word"] for w in event["words"]] == ["In", "1984", "it", "rained."]
    assert event["words"][0]["start"] == 10.0
    assert event["words"][-1]["end"] == pytest.approx(12.0)
    same = _words(2, "It rained.", 10.0, 2.0, spoken[3:])
    assert same == {"type": "words", "index": 2, "estimated": False, "words": [
        {"word": "It", "start": 10.3, "end": 10.38}, {"word": "rained.", "start": 10.4,
                                                     "end": 10.48}]}
    assert _words(0, "It rained.", 0.0, 1.0, None)["estimated"] is True  # no engine times


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_stored_keys_secret_is_checked_against_the_table(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """On both databases: a secret of a key in api_keys is good until the key is revoked
    (the lookup is a prefix match on the digest, escaped)."""
    import asyncio

    from sqlalchemy import insert, update
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from migrations import upgrade
    from models import utcnow
    from models.api_key import ApiKey, digest
    from models.db import async_sql_engine, sql_engine_for
    from models.settings import DatabaseSettings
    from tests.conftest import drop_database, make_database

    name = f"narrator_secrets_{uuid.uuid4().hex[:8]}"  # a key in a table closes its API
    url = f"sqlite:///{tmp_path}/narrator.db" if kind == "sqlite" else make_database(name)
    if kind == "postgres":
        request.addfinalizer(lambda: drop_database(name))
    upgrade(url)
    key, table = f"nk_{kind}_stored", sql_engine_for(url)
    request.addfinalizer(table.dispose)
    with table.begin() as connection:
        connection.execute(insert(ApiKey).values(
            name=kind, hint=key[:8], digest=digest(key), created_at=utcnow()))

    async def check(secret: str) -> str | None:
        engine = async_sql_engine(DatabaseSettings(database_url=url))
        try:
            return await client_secrets.owner_of_secret(secret, set(),
                                                        async_sessionmaker(engine))
        finally:
            await engine.dispose()

    secret = client_secrets.mint(key, int(time.time()) + 60)
    assert asyncio.run(check(secret)) == digest(key)[:32]
    assert asyncio.run(check(client_secrets.mint("nk_other", int(time.time()) + 60))) is None
    with table.begin() as connection:
        connection.execute(update(ApiKey).values(revoked_at=utcnow()))
    assert asyncio.run(check(secret)) is None
