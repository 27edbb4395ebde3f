"""Sync speech latency through `narrator serve` divided by the raw Piper engine's time.

Same ~300-character text; raw = Piper synthesis plus WAV encoding in this process; served =
`POST /v1/audio/speech` (response_format=wav) through the API, the embedded broker and the
worker. The two are interleaved after a warm-up and compared as medians. Target: <= 1.05.

    python -m bench.sync_overhead [--rounds 20]
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

    body = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "wav"}
    with served() as url, httpx.Client(base_url=url, timeout=120) as http:

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

    r, s = summary(raw_s), summary(served_s)
    ratio = s["median"] / r["median"]
    print(f"text: {len(TEXT)} characters, {audio_seconds:.2f} s of audio, "
          f"{args.rounds} rounds after {args.warmup} warm-up")
    print(table(["path", "median ms", "p90 ms", "min ms", "max ms"], [
        ["raw Piper + WAV encode", f"{r['median']*1000:.1f}", f"{r['p90']*1000:.1f}",
         f"{r['min']*1000:.1f}", f"{r['max']*1000:.1f}"],
        ["POST /v1/audio/speech (narrator serve)", f"{s['median']*1000:.1f}",
         f"{s['p90']*1000:.1f}", f"{s['min']*1000:.1f}", f"{s['max']*1000:.1f}"],
    ]))
    print(f"\nratio served/raw (medians): {ratio:.3f}   target <= 1.05   "
          f"overhead {1000 * (s['median'] - r['median']):.1f} ms")
    save("sync_overhead", {"text_chars": len(TEXT), "audio_seconds": audio_seconds,
                           "raw": r, "served": s, "ratio": ratio, "target": 1.05})


if __name__ == "__main__":
    main()
