"""bench.gpu_product's --live phases: bench.live's measures on the GPU product as deployed.

  text in, idle       a WebSocket session of LIVE seconds, a token every 30 ms (bench.live's
                      session), nothing else running: end of a sentence's text -> its first
                      audio, and whether playback would have starved
  text in, saturated  the same while JOBS jobs of SEGMENTS fill the batch engine (cancelled
                      after it; the row says whether they were still running at its end)
  book heard          a book of BOOK segments in MP3: submit -> the first fragment its HLS
                      playlist lists and serves (bench.live's run), then cancelled

Random weights never end a sentence, so every sentence of a session asks for LIVE_FRAMES
frames (50: 4 s, about a sentence of the text spoken) and every segment of the book for
FRAMES, as the jobs do.
"""

import argparse
import statistics
import time
from typing import Any

from bench import live


def measure(url: str, client: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the three phases against a ready platform (`client`: bench.gpu_product's)."""
    words = {"voice": client.voice, "max_new_tokens": args.live_frames}
    out: dict[str, Any] = {"idle": live.session(url, args.live, 30, words)}
    jobs = [client.submit(args.segments, f"live-{n}") for n in range(args.jobs)]
    time.sleep(args.settle)  # the jobs' first segments reach the engine
    out["saturated"] = live.session(url, args.live, 30, words)
    ended = time.monotonic()
    states = [client.http.get(f"/v1/audio/jobs/{job}").json() for job in jobs]
    out["saturated"]["jobs_running_at_end"] = sum(
        s["segments"]["done"] < s["segments"]["total"] for s in states)
    out["saturated"]["checked_after_s"] = round(time.monotonic() - ended, 2)
    for job in jobs:
        client.http.post(f"/v1/audio/jobs/{job}/cancel")
    out["book"] = live.run(client.http, args.book, 10.0,
                           {"voice": client.voice, "max_new_tokens": args.frames})
    return out


def rows(mode: str, r: dict[str, Any], args: argparse.Namespace) -> list[list[str]]:
    """The --live rows of bench.gpu_product's table."""
    out = []
    for name in ("idle", "saturated"):
        session = r[name]
        waits = session["first_audio_after_sentence_ms"]
        spread = (f"{statistics.median(waits):.0f} / "
                  f"{statistics.quantiles(waits, n=10)[-1]:.0f} / {max(waits):.0f} ms"
                  if len(waits) > 1 else "too few sentences")
        note = (f"{session['sentences']} sentences in {args.live:.0f} s; first sentence "
                f"{waits[0]:.0f} ms; smallest lead {session['smallest_lead_s']:.1f} s"
                if waits else "no audio")
        if name == "saturated":
            note += (f"; {session['jobs_running_at_end']} of {args.jobs} jobs still "
                     "running at its end")
        out.append([mode, f"text in over a WebSocket, {name}: end of a sentence -> its "
                    "first audio (p50 / p90 / max)", spread, note])
    book = r["book"]
    out.append([mode, f"book of {args.book} segments: submit -> playable first fragment",
                f"{book['first_fragment_s']:.2f} s",
                f"first segment done at {book['first_segment_s']:.2f} s"])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench.gpu_product's --live options."""
    parser.add_argument("--live", type=float, default=0, metavar="SECONDS",
                        help="then bench.live's measures: a WebSocket session this long idle "
                             "and again under JOBS jobs, and a book's first HLS fragment")
    parser.add_argument("--live-frames", type=int, default=50,
                        help="frames a streamed sentence asks for (random weights never stop)")
    parser.add_argument("--book", type=int, default=300, help="the book's segments")
