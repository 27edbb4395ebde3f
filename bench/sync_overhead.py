"""Sync speech latency through `narrator serve` divided by the bare Piper engine's time.

Same ~300-character text; raw = Piper synthesis plus WAV encoding in this process; served =
`POST /v1/audio/speech` (response_format=wav) through the API, the broker and the worker.
Each request is timed per second of the audio it returned (Piper's noise makes every answer
a little different in length). Two baselines, medians after a warm-up each:
- bare (the headline, as a new user would compare): raw alone with nothing else running,
  half the rounds before the server starts and half after it stopped, so that the machine's
  drift over the run (a shared 2-core VM here) weighs on both sides alike;
- interleaved: raw and served taken in turns while the server runs. Each side then starts
  while the other's ONNX Runtime threads still spin after its run, which slows both (the
  old method; kept for comparison);
- paired: the same turns with a pause before each side (no spinning threads left), each
  served answer divided by the raw run just before it, the median of those ratios. A VM
  whose speed shifts over tens of seconds (this one: 42 or 51 ms per audio-s, the same
  process) moves both sides of a pair alike, where it can move the bare phases and the
  served one apart.
The served figure of the headline is taken with answers one after another and this process
idle. Also the CPU per answer by process (from /proc) and what the idle server uses.
Target: served / bare <= 1.05. `--broker-url redis://...` measures production mode (Redis
broker and result streams) the same way.

    python -m bench.sync_overhead [--rounds 20] [--broker-url redis://127.0.0.1:6379/7]
"""

import argparse
import statistics
import time
from typing import Any

import httpx

from bench.common import busiest_threads, save, served, summary, table, thread_cpu

IDLE_S = 10.0
PAUSE_S = 0.5  # before each side of a pair: longer than ONNX Runtime's threads spin
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
    from workers.engines import SpeechRequest
    from workers.runtime.engine import get_engine

    engine = get_engine()
    # A realtime request runs on Piper's default session (ONNX Runtime's defaults, as
    # `PiperVoice.load` makes it): the bare engine as shipped. Job segments run elsewhere.
    request = SpeechRequest(text=TEXT, voice="joe", realtime=True)

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
        before_idle = thread_cpu()
        time.sleep(IDLE_S)  # what the idle server costs (broker polling, heartbeats)
        idle = busiest_threads(before_idle, thread_cpu(), IDLE_S, top=6)
        # Served answers one after another, this process idle: the headline. ONNX Runtime's
        # threads spin for a while after each run, so a raw run right before a served one
        # (or after) slows the other: that is the interleaved method's flaw, kept below.
        alone_s: list[float] = []
        served_cpu: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            start, snapshot = time.perf_counter(), thread_cpu()
            alone_s.append(through_platform())
            served_cpu.append(busiest_threads(snapshot, thread_cpu(),
                                              time.perf_counter() - start, top=6))
        raw_s, served_s = [], []
        raw_cpu = 0.0
        for _ in range(args.rounds):
            spent = time.process_time()
            raw_s.append(raw())
            raw_cpu += time.process_time() - spent
            served_s.append(through_platform())
        pairs = []
        for _ in range(args.rounds):
            time.sleep(PAUSE_S)
            alone_raw = raw()
            time.sleep(PAUSE_S)
            pairs.append(through_platform() / alone_raw)
        audio_seconds = float(http.post("/v1/audio/speech", json=body)
                              .headers["x-audio-duration"])
    after_s = [raw() for _ in range(args.rounds - half)]  # the server has stopped

    b, r, s = summary(bare_s + after_s), summary(raw_s), summary(served_s)
    a = summary(alone_s)
    before, after = summary(bare_s)["median"], summary(after_s)["median"] if after_s else 0.0
    ratio, interleaved = a["median"] / b["median"], s["median"] / r["median"]
    broker = args.broker_url or "embedded"
    print(f"text: {len(TEXT)} characters, {audio_seconds:.2f} s of audio, {args.rounds} rounds "
          f"after {args.warmup} warm-up; broker: {broker}")
    print(table(["path (ms per second of audio)", "median", "p90", "min", "max"], [
        [label, f"{x['median']*1000:.1f}", f"{x['p90']*1000:.1f}", f"{x['min']*1000:.1f}",
         f"{x['max']*1000:.1f}"] for label, x in (
            ("raw Piper + WAV encode, nothing else running (bare)", b),
            ("POST /v1/audio/speech (narrator serve), answers one after another", a),
            ("raw Piper + WAV encode, in turns with served answers (interleaved)", r),
            ("POST /v1/audio/speech, in turns with raw runs (interleaved)", s))]))
    print(f"\nserved / bare: {ratio:.3f}   target <= 1.05   overhead "
          f"{1000 * (a['median'] - b['median']) * audio_seconds:.1f} ms per answer of "
          f"{audio_seconds:.1f} s")
    print(f"bare before the server / after it: {1000 * before:.1f} / {1000 * after:.1f} ms "
          "per audio-s (the machine's drift)")
    print(f"interleaved served / interleaved raw: {interleaved:.3f}   (the old method: each "
          "side runs right after the other, whose ONNX threads still spin)")
    paired = statistics.median(pairs)
    print(f"paired served / raw, {PAUSE_S} s before each side: {paired:.3f} median of "
          f"{len(pairs)} (quartiles {statistics.quantiles(pairs, n=4)[0]:.3f}-"
          f"{statistics.quantiles(pairs, n=4)[2]:.3f}; the drift of the machine cancels out)")
    print("\nCPU per answer (core-ms; the served answers' from /proc, by process):")
    per: dict[str, float] = {}
    for cpu in served_cpu:
        for name, cores in cpu["processes"].items():
            label = name.split("[")[0][:40]
            per[label] = per.get(label, 0.0) + cores * cpu["seconds"] * 1000 / args.rounds
    rows = [["raw Piper + WAV encode (this process, interleaved runs)",
             f"{1000 * raw_cpu / args.rounds:.0f}"]]
    rows += [[f"served: {name}", f"{ms:.0f}"] for name, ms in sorted(
        per.items(), key=lambda kv: -kv[1]) if ms >= 1]
    print(table(["where", "core-ms per answer"], rows))
    print(f"the idle server, {IDLE_S:.0f} s: {idle['host_cores']:.3f} cores in all; " + "; ".join(
        f"{k.split('[')[0][:30]} {v:.3f}" for k, v in idle["processes"].items() if v))
    save("sync_overhead" + ("_redis" if args.broker_url else ""), {
        "text_chars": len(TEXT), "audio_seconds": audio_seconds, "broker": broker,
        "unit": "seconds per audio-second", "bare": b, "bare_before_median": before,
        "bare_after_median": after, "raw": r, "served": a, "served_interleaved": s,
        "ratio": ratio,
        "ratio_interleaved": interleaved, "ratio_paired": paired, "pairs": pairs,
        "target": 1.05,
        "raw_cpu_ms_per_answer": 1000 * raw_cpu / args.rounds, "served_cpu_ms_per_answer": per,
        "idle_server": idle})


if __name__ == "__main__":
    main()
