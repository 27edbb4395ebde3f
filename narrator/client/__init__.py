"""A typed Python client for Narrator's API, sync (`Narrator`) and async (`AsyncNarrator`).

    from narrator.client import Narrator

    with Narrator("http://127.0.0.1:8000", api_key="...") as tts:
        audio = tts.speak("Hello there.", response_format="wav")
        job = tts.submit(Path("book.epub"), response_format="m4b", subtitles=["srt"])
        job = tts.wait(job, progress=lambda j: print(j["progress"], j.get("eta_seconds")))
        tts.download(job, Path("book.m4b"))
        tts.download(job, Path("book.srt"), variant="subtitles_srt")

Errors come back as `NarratorError` subclasses carrying the API's error object. 429 and 503
answers are retried with backoff, waiting what `Retry-After` says, up to `retries` times;
a connection refused or reset before an answer is retried the same way. Jobs, voices and
models are returned as the API's JSON objects (dicts), as the API reference describes them.
"""

from narrator.client.asynchronous import AsyncNarrator
from narrator.client.errors import (
    BadRequest,
    Conflict,
    JobFailed,
    NarratorError,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
)
from narrator.client.requests import Progress, Speech
from narrator.client.sync import Narrator

__all__ = ["AsyncNarrator", "BadRequest", "Conflict", "JobFailed", "Narrator", "NarratorError",
           "NotFound", "Progress", "RateLimited", "ServerError", "Speech", "Unauthorized",
           "Unavailable"]
