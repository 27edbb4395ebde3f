"""Sync speech latency through `narrator serve` divided by the bare Piper engine's time.

Same ~300-character text; raw = Piper synthesis plus WAV encoding in this process; served =
`POST /v1/audio/speech` (response_format=wav) through the API, the broker and the worker.
Two baselines, medians after a warm-up each:
- bare (the headline, as a new user would compare): raw alone, before the server starts,
  with nothing else running;
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
        return time.perf_counter() - start

    for _ in range(args.warmup):
        raw()
    bare_s = [raw() for _ in range(args.rounds)]  # nothing else running yet
    body = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "wav"}
    env = {"NARRATOR_BROKER_URL": args.broker_url} if args.broker_url else {}
    with served(env) as url, httpx.Client(base_url=url, timeout=120) as http:

        def through_platform() -> float:
            start = time.perf_counter()
            response = http.post("/v1/audio/speech", json=body)
            response.raise_for_status()
            return time.perf_counter() - start

        for _ in range(args.warmup):
            raw()
            through_platform()
        raw_s, served_s = [], []
        for _ in range(args.rounds):
            raw_s.append(raw())
            served_s.append(through_platform())
        audio_seconds = float(http.post("/v1/audio/speech", json=body)
                              .headers["x-audio-duration"])

    b, r, s = summary(bare_s), summary(raw_s), summary(served_s)
    ratio, interleaved = s["median"] / b["median"], s["median"] / r["median"]
    broker = args.broker_url or "embedded"
    print(f"text: {len(TEXT)} characters, {audio_seconds:.2f} s of audio, {args.rounds} rounds "
          f"after {args.warmup} warm-up; broker: {broker}")
    print(table(["path", "median ms", "p90 ms", "min ms", "max ms"], [
        [label, f"{x['median']*1000:.1f}", f"{x['p90']*1000:.1f}", f"{x['min']*1000:.1f}",
         f"{x['max']*1000:.1f}"] for label, x in (
            ("raw Piper + WAV encode, nothing else running (bare)", b),
            ("raw Piper + WAV encode, beside the idle server (interleaved)", r),
            ("POST /v1/audio/speech (narrator serve)", s))]))
    print(f"\nserved / bare: {ratio:.3f}   target <= 1.05   overhead "
          f"{1000 * (s['median'] - b['median']):.1f} ms")
    print(f"served / interleaved raw: {interleaved:.3f}   (the old method: the idle server "
          "slows its baseline too)")
    save("sync_overhead" + ("_redis" if args.broker_url else ""), {
        "text_chars": len(TEXT), "audio_seconds": audio_seconds, "broker": broker,
        "bare": b, "raw": r, "served": s, "ratio": ratio, "ratio_interleaved": interleaved,
        "target": 1.05})


if __name__ == "__main__":
    main()
