"""Sync speech latency through `narrator serve` divided by the bare Piper engine's time.

Same ~300-character text; raw = Piper synthesis plus WAV encoding in this process; served =
`POST /v1/audio/speech` (response_format=wav) through the API, the broker and the worker.
Each request is timed per second of the audio it returned (Piper's noise makes every answer
a little different in length). Two baselines, medians after a warm-up each:
- bare (the headline, as a new user would compare): raw alone with nothing else running,
  half the rounds before the server starts and half after it stopped, so that the machine's
  drift over the run (a shared 2-core VM here) weighs on both sides alike;
- interleaved: raw and served taken in turns while the server runs, so the idle server's
  broker polling and worker slow the baseline too (flatters the ratio).
Target: served / bare <= 1.05. `--broker-url redis://...` measures production mode (Redis
broker and result streams) the same way.

    python -m bench.sync_overhead [--rounds 20] [--broker-url redis://127.0.0.1:6379/7]
"""

import argparse
import time

import httpx

from bench.common import save, served, summary, table

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
        "He trimmed the wick, polished the great lens, and watched the ships slip past "
        "the rocks. Nobody had asked him to stay after the light was automated, "
        "but he stayed anyway, because the sea had become the only company he trusted.")


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--broker-url", default="", help="e.g. redis://127.0.0.1:6379/7 "
                        "(default: the embedded broker)")
    args = parser.parse_args()

    from core.audio import encode
    from workers.engine import get_engine
    from workers.engines import SpeechRequest

    engine = get_engine()
    request = SpeechRequest(text=TEXT, voice="joe")

    def raw() -> float:
        start = time.perf_counter()
        audio = engine.synthesize([request])[0]
        encode(audio, engine.sample_rate, "wav")
        return (time.perf_counter() - start) / (len(audio) / engine.sample_rate)

    for _ in range(args.warmup):
        raw()
    half = max(1, args.rounds // 2)
    bare_s = [raw() for _ in range(half)]  # nothing else running yet
    body = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "wav"}
    env = {"NARRATOR_BROKER_URL": args.broker_url} if args.broker_url else {}
    with served(env) as url, httpx.Client(base_url=url, timeout=120) as http:

        def through_platform() -> float:
            start = time.perf_counter()
            response = http.post("/v1/audio/speech", json=body)
            response.raise_for_status()
            return (time.perf_counter() - start) / float(response.headers["x-audio-duration"])

        for _ in range(args.warmup):
            raw()
            through_platform()
        raw_s, served_s = [], []
        for _ in range(args.rounds):
            raw_s.append(raw())
            served_s.append(through_platform())
        audio_seconds = float(http.post("/v1/audio/speech", json=body)
                              .headers["x-audio-duration"])
    after_s = [raw() for _ in range(args.rounds - half)]  # the server has stopped

    b, r, s = summary(bare_s + after_s), summary(raw_s), summary(served_s)
    before, after = summary(bare_s)["median"], summary(after_s)["median"] if after_s else 0.0
    ratio, interleaved = s["median"] / b["median"], s["median"] / r["median"]
    broker = args.broker_url or "embedded"
    print(f"text: {len(TEXT)} characters, {audio_seconds:.2f} s of audio, {args.rounds} rounds "
          f"after {args.warmup} warm-up; broker: {broker}")
    print(table(["path (ms per second of audio)", "median", "p90", "min", "max"], [
        [label, f"{x['median']*1000:.1f}", f"{x['p90']*1000:.1f}", f"{x['min']*1000:.1f}",
         f"{x['max']*1000:.1f}"] for label, x in (
            ("raw Piper + WAV encode, nothing else running (bare)", b),
            ("raw Piper + WAV encode, beside the idle server (interleaved)", r),
            ("POST /v1/audio/speech (narrator serve)", s))]))
    print(f"\nserved / bare: {ratio:.3f}   target <= 1.05   overhead "
          f"{1000 * (s['median'] - b['median']) * audio_seconds:.1f} ms per answer of "
          f"{audio_seconds:.1f} s")
    print(f"bare before the server / after it: {1000 * before:.1f} / {1000 * after:.1f} ms "
          "per audio-s (the machine's drift)")
    print(f"served / interleaved raw: {interleaved:.3f}   (the old method: the idle server "
          "slows its baseline too)")
    save("sync_overhead" + ("_redis" if args.broker_url else ""), {
        "text_chars": len(TEXT), "audio_seconds": audio_seconds, "broker": broker,
        "unit": "seconds per audio-second", "bare": b, "bare_before_median": before,
        "bare_after_median": after, "raw": r, "served": s, "ratio": ratio,
        "ratio_interleaved": interleaved, "target": 1.05})


if __name__ == "__main__":
    main()
