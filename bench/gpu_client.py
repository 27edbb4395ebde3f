"""The HTTP client of bench.gpu_product: jobs submitted and waited for, streamed first audio,
and sync answers, each as an application calls the API."""

import statistics
import time

import httpx

# About 20 s of speech in four sentences (the random-weight model never stops on its own:
# the request's max_new_tokens is shared among them by length, see workers/speech.py).
ANSWER = ("Thanks for calling the library. Your books are due back on Friday the twelfth. "
          "You can renew them online or at the front desk. "
          "Is there anything else I can help you with today?")


# About 20 s of speech in one sentence of 44 words: spoken in its clauses, at once.
LONG_SENTENCE = ("When the library reopens on Monday, the front desk will take returns all day, "
                 "the reading room will keep its usual hours until eight in the evening, and "
                 "the children's corner, closed since the flood, will welcome its first story "
                 "time at ten.")


class Client:
    """The HTTP side: jobs and speech, as users send them."""

    def __init__(self, url: str, voice: str, frames: int) -> None:
        self.http = httpx.Client(base_url=url, timeout=600)
        self.voice, self.frames = voice, frames
        self.synthesized: dict[str, float] = {}

    def submit(self, segments: int, tag: str) -> str:
        """Submit a job of `segments` segments (one paragraph each)."""
        text = "\n\n".join(f"Job {tag}, paragraph {n}: the platform reads this aloud."
                           for n in range(segments))
        response = self.http.post("/v1/audio/jobs", json={
            "input": text, "voice": self.voice, "max_new_tokens": self.frames})
        response.raise_for_status()
        return str(response.json()["id"])

    def wait(self, *job_ids: str) -> float:
        """Wait for jobs to complete, polling all of them every 0.2 s; return speech audio-s.

        `self.synthesized[job_id]` is when its last segment was first seen done: what follows
        is assembly.
        """
        pending, audio = list(job_ids), 0.0
        while pending:
            for job_id in list(pending):
                job = self.http.get(f"/v1/audio/jobs/{job_id}").json()
                segments = job["segments"]
                if (segments["total"] and segments["done"] == segments["total"]) or \
                        job["status"] in ("completed", "failed", "cancelled"):
                    self.synthesized.setdefault(job_id, time.monotonic())
                if job["status"] in ("completed", "failed", "cancelled"):
                    pending.remove(job_id)
                    if job["status"] != "completed":
                        raise RuntimeError(f"job {job_id} ended {job['status']}: "
                                           f"{job.get('error')}")
                    manifest = self.http.get(job["result"]["manifest_url"]).json()
                    audio += float(sum(s["duration_seconds"] for s in manifest["segments"]))
            time.sleep(0.2)
        return audio

    def first_audio(self) -> float:
        """Return seconds to the first byte of a streamed request."""
        return self.first_audio_at()[0]

    def first_audio_at(self) -> tuple[float, float]:
        """Return seconds to the first byte of a streamed request, and when it came."""
        started = time.monotonic()
        with self.http.stream("POST", "/v1/audio/speech", json={
                "input": "How fast does the first sound arrive?", "voice": self.voice,
                "response_format": "pcm", "stream_format": "audio",
                "max_new_tokens": self.frames}) as response:
            response.raise_for_status()
            chunks = response.iter_bytes()
            next(chunks)
            first = time.monotonic() - started
            b"".join(chunks)  # the rest of the answer, as a client reads it
        return first, started + first

    def sync(self, text: str = "A whole answer, at once.") -> float:
        """Return seconds for a whole wav of `frames` frames (in all, over its sentences)."""
        started = time.monotonic()
        self.http.post("/v1/audio/speech", json={
            "input": text, "voice": self.voice,
            "response_format": "wav", "max_new_tokens": self.frames}).raise_for_status()
        return time.monotonic() - started

    def sync_sentences(self) -> float:
        """A whole wav of four sentences: the worker speaks them at once (SYNC_PIECES), each
        with its share of the frames by length, as a real model ends each at its own length."""
        return self.sync(ANSWER)

    def sync_long_sentence(self) -> float:
        """A whole wav of one long sentence: the worker speaks its clauses at once."""
        return self.sync(LONG_SENTENCE)


def percentiles(samples: list[float]) -> str:
    """Return 'p50 / p90 / p99' in ms (nearest rank)."""
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    return f"{statistics.median(ordered) * 1000:.0f} / {rank(0.9):.0f} / {rank(0.99):.0f} ms"

