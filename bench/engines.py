"""The two CPU engines side by side, Piper and Kokoro, as `narrator serve` runs them with its
default settings (both engines' workers), over HTTP, and each engine bare in this process.

Per engine: the bare engine's compute per second of audio (a sync request's session, every
core; and a job segment's session, one thread), sync speech through the API (ms per second
of audio, median of ROUNDS), streamed first audio (first PCM byte after the request, median
and max of ROUNDS), a job of about JOB_CHARS characters (audio seconds made per second from
submit to completed), and the recognition check (PocketSphinx, the text's own words) on a
held-out paragraph in every voice of the engine: its word error rate.

    python -m bench.engines [--rounds 10] [--job-chars 3000]

Both engines' workers share this machine's cores: a figure taken through the server is the
engine's share of a server that also runs the other, idle, engine.
"""

import argparse
import statistics
import time
from typing import Any

import httpx

from bench.common import save, served, summary, table

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
        "He trimmed the wick, polished the great lens, and watched the ships slip past "
        "the rocks.")
HELD_OUT = ("A narrow road wound between the hills toward the village. Farmers carried "
            "baskets of apples to the market, and children ran ahead to watch the carts.")
JOB_SENTENCE = "The river kept its own slow time, and the town grew up along its banks. "


def bare(engine: Any, voice: str, rounds: int) -> dict[str, float]:
    """Compute per second of audio of the bare engine, on its sync and its job session."""
    from workers.engines import SpeechRequest

    out = {}
    for name, realtime in (("sync_session", True), ("job_session", False)):
        request = SpeechRequest(text=TEXT, voice=voice, realtime=realtime)
        engine.synthesize([request])  # warm
        per = []
        for _ in range(rounds):
            start = time.perf_counter()
            audio = engine.synthesize([request])[0]
            per.append((time.perf_counter() - start) / (len(audio) / engine.sample_rate))
        out[name] = statistics.median(per)
    return out


def heard(engine: Any, voices: list[str]) -> dict[str, float]:
    """The recognition check's word error rate on HELD_OUT, per voice."""
    from core.hearing import word_error_rate
    from workers.aligners import words_of
    from workers.aligners.sphinx import SphinxAligner
    from workers.engines import SpeechRequest

    hearer, expected = SphinxAligner(), [w.lower() for w in words_of(HELD_OUT)]
    out = {}
    for voice in voices:
        audio = engine.synthesize([SpeechRequest(text=HELD_OUT, voice=voice)])[0]
        words = hearer.transcribe(audio, engine.sample_rate, HELD_OUT) or []
        out[voice] = word_error_rate(expected, [w.word.lower() for w in words])
    return out


def through_server(http: httpx.Client, model: str, voice: str, rounds: int,
                   job_chars: int) -> dict[str, Any]:
    """Sync, streamed first audio and a job through the API."""
    body = {"model": model, "voice": voice, "input": TEXT}
    http.post("/v1/audio/speech", json=body | {"response_format": "wav"}).raise_for_status()
    sync, first = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        response = http.post("/v1/audio/speech", json=body | {"response_format": "wav"})
        response.raise_for_status()
        sync.append((time.perf_counter() - start) / float(response.headers["x-audio-duration"]))
        start = time.perf_counter()
        with http.stream("POST", "/v1/audio/speech",
                         json=body | {"response_format": "pcm"}) as stream:
            chunks = stream.iter_bytes()
            next(chunks)
            first.append(time.perf_counter() - start)
            for _ in chunks:  # the rest of the answer
                pass
    text = JOB_SENTENCE * max(1, job_chars // len(JOB_SENTENCE))
    start = time.perf_counter()
    job = http.post("/v1/audio/jobs", json={"model": model, "voice": voice, "input": text,
                                            "response_format": "mp3"}).json()
    while job["status"] not in ("completed", "failed", "cancelled"):
        time.sleep(0.2)
        job = http.get(f"/v1/audio/jobs/{job['id']}").json()
    wall = time.perf_counter() - start
    if job["status"] != "completed":
        raise RuntimeError(f"{model} job ended {job['status']}: {job}")
    audio = float(job["result"]["duration_seconds"])
    return {"sync_s_per_audio_s": summary(sync), "first_audio_s": summary(first),
            "job": {"chars": len(text), "audio_s": audio, "wall_s": wall,
                    "rate": audio / wall}}


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--job-chars", type=int, default=3000)
    args = parser.parse_args()

    from core.catalog import KOKORO_VOICES, kokoro_model, piper_model
    from workers.engines.kokoro import KokoroEngine
    from workers.engines.piper import PiperEngine

    engines = {"piper": (PiperEngine(piper_model("piper")), ["joe"]),
               "kokoro": (KokoroEngine(kokoro_model("kokoro")), list(KOKORO_VOICES))}
    results: dict[str, dict[str, Any]] = {}
    for name, (engine, voices) in engines.items():
        results[name] = {"bare": bare(engine, voices[0], args.rounds),
                         "wer": heard(engine, voices)}
    del engines  # the server's workers get the cores and the memory
    with served() as url, httpx.Client(base_url=url, timeout=300) as http:
        deadline = time.monotonic() + 90
        while http.get("/v1/models/kokoro").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("narrator serve started no Kokoro worker")
            time.sleep(0.5)
        for name, voice in (("piper", "joe"), ("kokoro", "jf_alpha")):
            results[name] |= through_server(http, name, voice, args.rounds, args.job_chars)
    rows = []
    for name, r in results.items():
        wer = r["wer"]
        rows.append([name, f"{1000 * r['bare']['sync_session']:.0f}",
                     f"{1000 * r['bare']['job_session']:.0f}",
                     f"{1000 * r['sync_s_per_audio_s']['median']:.0f}",
                     f"{1000 * r['first_audio_s']['median']:.0f} / "
                     f"{1000 * r['first_audio_s']['max']:.0f}",
                     f"{r['job']['rate']:.1f}",
                     f"{statistics.mean(wer.values()):.3f} (max {max(wer.values()):.3f}, "
                     f"{len(wer)} voices)"])
    print(f"{args.rounds} rounds; sync text {len(TEXT)} characters; job "
          f"{results['piper']['job']['chars']} characters, MP3")
    print(table(["engine", "bare, sync session (ms per audio-s)",
                 "bare, job session (ms per audio-s)", "served sync (ms per audio-s)",
                 "served streamed first audio, median / max (ms)", "job (audio-s per s)",
                 "recognition check WER, mean"], rows))
    save("engines", {"rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
