"""MP3 and m4b assembly of a long book: from scratch, and after its fragments were encoded ahead.

A harness, not the product: synthetic parts (a 220 Hz tone, 20 s each, at Piper's 22.05 kHz)
in a local media folder, assembled in this process by `workers.book.assembly.assemble` into one
book and four chapter files (MP3, or m4b with AAC), -16 LUFS. It leaves out the queue, the
database and the engine; `bench.longform` runs the whole platform. Three timings per size:

  scratch      every part read, normalised and encoded at assembly (ASSEMBLY_THREADS cores)
  ahead        the CPU time the fragments cost when encoded one by one as their segments
               finish (narrator.encode_fragment), done here before the assembly
  tail         the assembly after that: what is left between the last segment and `completed`

    python -m bench.assembly [--hours 0.5 2] [--formats mp3 m4b] [--threads 0]
"""

import argparse
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from bench.common import save, table

RATE, PART_SECONDS = 22050, 20


def book(folder: str, hours: float, fmt: str) -> tuple[Any, list[Any], Any]:
    """Write the parts of a book of `hours`; return its job, segments and store."""
    from models import Job, Segment
    from storage import MediaStore
    from workers.book.parts import part_bytes

    store = MediaStore(f"file://{folder}")
    count = int(hours * 3600 / PART_SECONDS)
    tone = (0.2 * np.sin(np.arange(RATE * PART_SECONDS) * 2 * np.pi * 220 / RATE))
    data = part_bytes(tone.astype(np.float32), RATE)
    job = Job(id=uuid.uuid4(), model="piper", voice="joe", response_format=fmt, speed=1.0,
              options={"language": "en"}, input_characters=0,
              chapters=[{"title": f"Part {n + 1}", "input": ""} for n in range(4)])
    segments = [Segment(id=uuid.uuid4(), index=n, chapter=n * 4 // count, text="A sentence.",
                        samples=RATE * PART_SECONDS, pause_after=0.25, attempts=1)
                for n in range(count)]
    for n in range(count):
        store.put(f"p/{n:06d}.wav", data)
    return job, segments, store


def run(hours: float, fmt: str, threads: int) -> dict[str, Any]:
    """Time the three phases for one book."""
    from core.audio import decode
    from workers.book import assembly, fragments, parts
    from workers.book.timeline import cuts_after

    with tempfile.TemporaryDirectory(prefix="narrator-bench-") as folder:
        job, segments, store = book(folder, hours, fmt)

        def key(s: Any) -> str:
            return f"p/{s.index:06d}.wav"

        start = time.perf_counter()
        scratch = assembly.assemble(job, segments, store, store, key, -16.0, threads=threads)
        scratch_s = time.perf_counter() - start
        # Ahead: each fragment as narrator.encode_fragment makes it, one task at a time.
        start = time.perf_counter()
        first = 0
        for n, segment in enumerate(segments):
            following = segments[n + 1] if n + 1 < len(segments) else None
            if following is not None and not cuts_after(segment, following):
                continue
            group = segments[first:n + 1]
            encoded = fragments.encode_group(
                group, following,
                lambda s: parts.finish(s, store, key, -16.0, RATE), RATE, fmt)
            assembly.keep_fragment(store, fragments.group_key(
                job.id, group, following, -16.0, RATE, fmt), encoded)
            first = n + 1
        ahead_s = time.perf_counter() - start
        start = time.perf_counter()
        tail = assembly.assemble(job, segments, store, store, key, -16.0, threads=threads)
        tail_s = time.perf_counter() - start
        with store.open(tail["key"]) as f:
            decoded = len(decode(f.read())[0])
    assert scratch["duration_seconds"] == tail["duration_seconds"]
    samples = round(tail["duration_seconds"] * RATE)
    # An m4b's end is trimmed by its edit list, which FFmpeg's decoder leaves to players: its
    # last AAC frame decodes whole (tests/test_fragments.py).
    exact = decoded == samples if fmt == "mp3" else 0 <= decoded - samples < fragments.AAC_FRAME
    return {"hours": hours, "format": fmt, "parts": len(segments), "scratch_s": scratch_s,
            "ahead_s": ahead_s, "tail_s": tail_s, "exact": exact}


def main() -> None:
    """Run each size and print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, nargs="+", default=[0.5, 2.0])
    parser.add_argument("--formats", nargs="+", default=["mp3", "m4b"],
                        choices=["mp3", "m4b"])
    parser.add_argument("--threads", type=int, default=0, help="0: one per core")
    args = parser.parse_args()
    results = [run(hours, fmt, args.threads) for fmt in args.formats for hours in args.hours]
    print(table(["format", "audio", "parts", "scratch", "fragments ahead (CPU)", "tail after "
                 "the last segment", "decoded length exact"],
                [[r["format"], f"{r['hours']} h", r["parts"], f"{r['scratch_s']:.1f} s",
                  f"{r['ahead_s']:.1f} s", f"{r['tail_s']:.2f} s", r["exact"]]
                 for r in results]))
    save("assembly", {"threads": args.threads, "results": results})


if __name__ == "__main__":
    main()
