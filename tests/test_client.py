"""narrator.client against a running API (Postgres, Redis, Piper): speech, jobs from text,
Markdown and EPUB, progress, downloads, typed errors; and its retries on 429 and 503 against
a real HTTP server that answers them on purpose. The CLI's tests (tests/test_cli.py) go
through the same client."""

import asyncio
import concurrent.futures
import json
import threading
import uuid
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any, ClassVar

import pytest

from core.ids import job_id
from narrator.client import (
    AsyncNarrator,
    BadRequest,
    Conflict,
    Narrator,
    NotFound,
    Unavailable,
)
from tests.epub_maker import make_epub
from tests.support import Stack, audio_stats


def wav_seconds(audio: bytes) -> float:
    with wave.open(BytesIO(audio)) as w:
        return float(w.getnframes() / w.getframerate())


def test_speak_from_threads_at_once_and_lists(local_stack: Stack) -> None:
    """One client shared by four threads, as an app's request handlers share it."""
    with Narrator(local_stack.url) as tts:
        voice = tts.voices()[0]["id"]
        assert [m["id"] for m in tts.models()]
        texts = [f"Thread number {n} says hello." for n in range(4)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(
                lambda t: tts.speak(t, voice=voice, response_format="wav"), texts))
    for audio in answers:
        assert audio[:4] == b"RIFF"
        assert audio.duration is not None
        assert abs(wav_seconds(audio) - audio.duration) < 0.05


def test_a_markdown_book_waits_with_progress_and_downloads_its_files(
        local_stack: Stack, tmp_path: Path) -> None:
    book = tmp_path / "book.md"
    book.write_text("# One\n\nThe boats came in at dawn.\n\n# Two\n\nFish were sold by noon.\n",
                    encoding="utf-8")
    seen: list[dict[str, Any]] = []
    with Narrator(local_stack.url) as tts:
        job = tts.submit(book, response_format="mp3", subtitles=["srt", "words"],
                         idempotency_key="client-book-1")
        again = tts.submit(book, response_format="mp3", subtitles=["srt", "words"],
                           idempotency_key="client-book-1")
        assert again["id"] == job["id"]  # the same key and body: the same job
        done = tts.wait(job, progress=seen.append, poll=0.2)
        assert done["status"] == "completed"
        audio = tts.download(done, tmp_path / "book.mp3")
        srt = tts.download(done, str(tmp_path / "book.srt"), variant="subtitles_srt")  # a str
        chapter = tts.download(done, tmp_path / "two.mp3", variant="chapter", index=1)
        manifest = json.loads(tts.download(done, tmp_path / "m.json",
                                           variant="manifest").read_text())
    assert seen[-1]["status"] == "completed"
    progress = [s["progress"] for s in seen]
    assert progress == sorted(progress)
    assert progress[-1] == 100
    assert audio_stats(audio.read_bytes(), "mp3")[0] > 2.0
    assert "boats came in at dawn" in srt.read_text().lower()
    assert 0.5 < audio_stats(chapter.read_bytes(), "mp3")[0] < audio_stats(
        audio.read_bytes(), "mp3")[0]
    assert len(manifest["segments"]) == 2


def test_an_epub_and_the_async_client(local_stack: Stack, tmp_path: Path) -> None:
    epub = tmp_path / "tale.epub"
    epub.write_bytes(make_epub([("Morning", "The bell rang twice."),
                                ("Evening", "The lamps were lit.")]))

    async def run() -> tuple[dict[str, Any], bytes, list[bytes]]:
        async with AsyncNarrator(local_stack.url) as tts:
            job = await tts.submit(epub, response_format="wav")
            speech, done = await asyncio.gather(
                tts.speak("Meanwhile, a short answer.", response_format="wav"),
                tts.wait(job, poll=0.2))
            chunks = [c async for c in tts.speak_stream("Streamed, piece by piece.")]
            written = await tts.download(done, str(tmp_path / "tale.wav"))  # a str path
            assert written == tmp_path / "tale.wav"
            assert written.stat().st_size > 1000
            return done, speech, chunks

    done, speech, chunks = asyncio.run(run())
    titles = [c["title"] for c in done["result"]["chapters"]]
    assert titles == ["Morning (toc)", "Evening (toc)"]  # from the table of contents
    assert wav_seconds((tmp_path / "tale.wav").read_bytes()) > 1.0
    assert wav_seconds(speech) > 0.5
    assert sum(len(c) for c in chunks) > 22050  # 16-bit PCM: more than half a second


def test_errors_are_typed_and_carry_the_api_error(local_stack: Stack, tmp_path: Path) -> None:
    with Narrator(local_stack.url) as tts:
        with pytest.raises(BadRequest) as bad:
            tts.speak("Hello.", voice="nope")
        assert bad.value.status == 400
        assert bad.value.param == "voice"
        assert "unknown voice 'nope'" in bad.value.message
        with pytest.raises(NotFound):
            tts.get(job_id(uuid.uuid4()))
        job = tts.submit("A sentence. " * 40, response_format="wav")
        with pytest.raises(Conflict):  # content before the job is completed
            tts.download(job, tmp_path / "early.wav")
        assert not (tmp_path / "early.wav").exists()
        tts.cancel(job)
        assert tts.get(job)["status"] == "cancelled"


class _Flaky(BaseHTTPRequestHandler):
    """Answers 429 and then 503, each with Retry-After, before answering."""

    answers: ClassVar[list[tuple[int, dict[str, str]]]] = []
    seen: ClassVar[list[str]] = []
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            self.seen.append(self.path)
            status, headers = self.answers.pop(0) if self.answers else (200, {})
        body = (json.dumps({"object": "list", "data": [{"id": "piper"}]}) if status == 200 else
                json.dumps({"error": {"message": "busy", "type": "rate_limit_error",
                                      "param": None, "code": None}})).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Flaky.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_429_and_503_are_retried_as_retry_after_says(flaky: str) -> None:
    _Flaky.answers = [(429, {"Retry-After": "0"}), (503, {"Retry-After": "0"})]
    with Narrator(flaky) as tts:
        assert tts.models() == [{"id": "piper"}]
    assert _Flaky.seen == ["/v1/models"] * 3
    _Flaky.seen.clear()
    _Flaky.answers = [(503, {"Retry-After": "0"})] * 3
    with Narrator(flaky, retries=2) as tts, pytest.raises(Unavailable) as down:
        tts.models()
    assert len(_Flaky.seen) == 3  # the first try and two retries
    assert down.value.retry_after == 0.0
    assert down.value.message == "busy"
