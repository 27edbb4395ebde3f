"""Piper's throughput on this host's cores: one segment at a time on every core, or several
segments at once, one core each.

The bare engine as shipped (`PiperVoice.load`: ONNX Runtime's defaults, an intra-op thread
per core) speaks a book's planned segments one after another; against it, one ONNX session
with a single intra-op thread, driven by 1 and by N threads (N = the host's cores), each
thread taking the next segment as it finishes (ONNX Runtime runs one session from several
threads at once; Piper serialises espeak-ng behind its own lock). Rows in turns, REPS times;
audio-s per wall-s, its ratio to the bare engine of the same round, and CPU s per audio-s.
No platform: the engine alone (bench.longform runs the jobs).

    python -m bench.piper_parallel [--chars 8000] [--reps 3] [--threads N]
"""

import argparse
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from piper import PiperVoice

from bench.common import save, table
from bench.longform import book
from workers.engines.piper import load_voice


def planned(chapters: list[dict[str, str]]) -> list[str]:
    """Return the chapters' planned segments, in spoken form, as a job plans them."""
    from core.normalize import spoken
    from core.text import Gaps, plan_pieces
    from workers.settings import get_settings

    settings = get_settings()
    gaps = Gaps(settings.sentence_gap_seconds, settings.paragraph_gap_seconds,
                settings.chapter_gap_seconds)
    return [spoken(piece.text) for piece in plan_pieces(
        [c["input"] for c in chapters], settings.segment_chars, gaps)]


def speak(v: PiperVoice, text: str) -> int:
    """Return the samples of `text` spoken."""
    return sum(len(chunk.audio_float_array) for chunk in v.synthesize(text))


def run(v: PiperVoice, texts: list[str], threads: int,
        snapshot: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Speak every text on `threads` threads; return audio-s/s, CPU s per audio-s, and
    `snapshot()` taken once the work is done while the threads still live (per-thread CPU
    readers see only live threads)."""
    work: queue.Queue[str] = queue.Queue()
    for text in texts:
        work.put(text)
    samples: list[int] = []
    finished, release = threading.Barrier(threads + 1), threading.Event()

    def loop() -> None:
        while True:
            try:
                text = work.get_nowait()
            except queue.Empty:
                break
            samples.append(speak(v, text))  # list.append is atomic
        finished.wait()
        release.wait()

    start, cpu = time.perf_counter(), time.process_time()
    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    finished.wait()
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    taken = snapshot() if snapshot else None
    release.set()
    for t in pool:
        t.join()
    audio = sum(samples) / v.config.sample_rate
    return {"rate": audio / wall, "cpu_per_audio_s": used / audio, "audio_s": audio,
            "wall_s": wall, "snapshot": taken}


def main() -> None:
    """Run the rows in turns and print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=8000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    texts = planned(book(args.chars))
    bare, single = load_voice(), load_voice(intra_op_threads=1)
    for v in (bare, single):
        speak(v, "Warm up.")
    rows_spec = [("bare engine (ONNX defaults), one segment at a time", bare, 1),
                 ("one intra-op thread, one segment at a time", single, 1),
                 (f"one intra-op thread, {args.threads} segments at once", single, args.threads)]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in rows_spec}
    for _ in range(args.reps):
        for name, v, threads in rows_spec:
            results[name].append(run(v, texts, threads))
    rows: list[list[Any]] = []
    for name, _, _ in rows_spec:
        rates = [r["rate"] for r in results[name]]
        ratios = [r["rate"] / b["rate"] for r, b in zip(results[name], results[rows_spec[0][0]],
                                                         strict=True)]
        rows.append([name, " / ".join(f"{x:.2f}" for x in rates),
                     f"{statistics.median(ratios):.3f}",
                     f"{statistics.median(r['cpu_per_audio_s'] for r in results[name]):.4f}"])
    print(f"{len(texts)} segments, {results[rows_spec[0][0]][0]['audio_s']:.0f} audio-s, "
          f"{os.cpu_count()} cores, {args.reps} rounds")
    print(table(["path", "audio-s/s (each round)", "÷ bare (median)", "CPU s per audio-s"],
                rows))
    save("piper_parallel", {"args": vars(args), "segments": len(texts), "results": results})


if __name__ == "__main__":
    main()
