"""Word alignment against ground truth: where the aligner puts sentence boundaries.

Each sentence of a held-out text is synthesised alone with Piper, so where its speech starts
and ends inside its own clip is known to the 10 ms window (the first and last window above
a level: -60 and -40 dBFS are both reported, as sentence ends fade slowly and the level
moves them by tens of ms). The clips are joined back to back into segments of SENTENCES
sentences, as jobs join sentences, and each segment is aligned with its spoken text. The
error of a boundary is the aligned start of a sentence's first word (or end of its last)
minus the true one.
Target (issue 18): median < 40 ms, p95 < 120 ms. Also the aligner's CPU time per audio
second (one thread) and how many words it could not place (estimated).

    python -m bench.align [--sentences 3] [--text FILE] [--heard]
"""

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import save, table

# Held out: written for this bench, not used by any test or by the engine's training data
# as far as anyone knows. Mixed lengths, numbers, names, and a question.
TEXT = """The ferry left the harbour at a quarter past seven, twenty minutes late.
Nobody on the deck seemed to mind the delay. A child counted the gulls that followed the
wake and lost count at forty. Her grandmother wrapped a scarf around both of them.
Is the island really as quiet as they say? The captain laughed and said it depended on the
season. In winter the village shrinks to a few hundred people and one open shop.
The bakery opens at six, and the bread is gone by nine. Visitors learn that lesson on their
first morning. The lighthouse keeper retired in 1998 and never moved away.
He still walks to the point every evening to watch the lamp come on.
The school has eleven pupils and a single teacher who also runs the choir.
Every August the harbour fills with small boats for the regatta.
Most of them are older than their owners, and some are older than the pier.
When the fog rolls in, the foghorn sounds twice a minute until dawn.
The ferry back to the mainland leaves at four, and it is never late on the way home."""


THRESHOLDS_DB = (-60.0, -40.0)  # where "speech" starts and ends in a clip: both reported


def speech_bounds(clip: np.ndarray, rate: int, db: float) -> tuple[int, int]:
    """Return the first and last sample of speech: 10 ms windows above `db` dBFS."""
    window = rate // 100
    frames = len(clip) // window
    rms = np.sqrt(np.mean(clip[: frames * window].reshape(frames, window) ** 2, axis=1))
    loud = np.flatnonzero(rms > 10 ** (db / 20))
    return int(loud[0] * window), int((loud[-1] + 1) * window)


def main() -> None:
    """Synthesise, align, compare; print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=3, help="sentences per segment")
    parser.add_argument("--text", type=Path)
    parser.add_argument("--heard", action="store_true",
                        help="place words from the recogniser's spans (verify's path, "
                             "workers.aligners.placed) instead of forced alignment")
    args = parser.parse_args()

    from core.normalize import spoken
    from core.text import sentences
    from workers.aligners import placed, words_of
    from workers.aligners.sphinx import SphinxAligner
    from workers.engines import SpeechRequest
    from workers.runtime.engine import get_engine

    text = args.text.read_text(encoding="utf-8") if args.text else TEXT
    said = [spoken(s, "en") for s in sentences(" ".join(text.split()), "en")]
    engine = get_engine()
    voice = engine.info.voices[0].id
    rate = engine.sample_rate
    clips = engine.synthesize([SpeechRequest(text=s, voice=voice) for s in said])
    aligner = SphinxAligner()
    aligner.align(clips[0], rate, said[0])  # build the decoders outside the timing
    aligner.transcribe(clips[0], rate, said[0])
    starts: dict[float, list[float]] = {db: [] for db in THRESHOLDS_DB}
    ends: dict[float, list[float]] = {db: [] for db in THRESHOLDS_DB}
    spent, audio_s, estimated, words_total, failed = 0.0, 0.0, 0, 0, 0
    for first in range(0, len(said), args.sentences):
        group = list(range(first, min(first + args.sentences, len(said))))
        audio = np.concatenate([clips[k] for k in group])
        segment_text = " ".join(said[k] for k in group)
        began = time.perf_counter()
        if args.heard:
            heard = aligner.transcribe(audio, rate, segment_text)
            words = heard and placed(words_of(segment_text), heard, len(audio), rate)
        else:
            words = aligner.align(audio, rate, segment_text)
        spent += time.perf_counter() - began
        audio_s += len(audio) / rate
        if words is None:
            failed += 1
            continue
        words_total += len(words)
        estimated += sum(w.estimated for w in words)
        offset, at = 0, 0
        for k in group:
            count = len(words_of(said[k]))
            mine = words[at: at + count]
            for db in THRESHOLDS_DB:
                begin, end = speech_bounds(clips[k], rate, db)
                starts[db].append((mine[0].start - (offset + begin)) / rate * 1000)
                ends[db].append((mine[-1].end - (offset + end)) / rate * 1000)
            offset += len(clips[k])
            at += count

    def stats(values: list[float]) -> str:
        ordered = sorted(abs(v) for v in values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return f"{statistics.median(ordered):.0f} / {p95:.0f}"

    rows = []
    for db in THRESHOLDS_DB:
        rows += [[f"{db:.0f} dBFS", "sentence starts (first word)", len(starts[db]),
                  stats(starts[db]), f"{statistics.median(starts[db]):+.0f}"],
                 [f"{db:.0f} dBFS", "sentence ends (last word)", len(ends[db]),
                  stats(ends[db]), f"{statistics.median(ends[db]):+.0f}"],
                 [f"{db:.0f} dBFS", "all boundaries", 2 * len(starts[db]),
                  stats(starts[db] + ends[db]), ""]]
    method = "words placed where the recogniser heard them" if args.heard else \
        "forced alignment"
    print(f"PocketSphinx {method}, Piper ({engine.info.id}), {len(said)} sentences in "
          f"segments of {args.sentences}; {failed} segments not aligned; {estimated} of "
          f"{words_total} words estimated (not in the dictionary)")
    print(table(["truth at", "boundary", "n", "|error| median / p95 (ms)",
                 "signed median (ms)"], rows))
    print(f"alignment: {spent / audio_s * 1000:.1f} ms CPU per audio second "
          f"({audio_s:.0f} s of audio, one thread)")
    result: dict[str, Any] = {"sentences": len(said), "per_segment": args.sentences,
                              "failed": failed, "estimated_words": estimated,
                              "words": words_total,
                              "start_errors_ms": {str(k): v for k, v in starts.items()},
                              "end_errors_ms": {str(k): v for k, v in ends.items()},
                              "ms_per_audio_second":
                              spent / audio_s * 1000}
    save("align_heard" if args.heard else "align", result)


if __name__ == "__main__":
    main()
