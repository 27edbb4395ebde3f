"""The recognition check (verify "flag"): what it catches, what it flags wrongly, its cost.

Each sentence of bench.align's held-out text is synthesised alone with Piper, and the clips
are joined into segments of SENTENCES sentences, as jobs join them; so each segment's true
sentence boundaries are exact sample counts. Every segment is heard three ways:

  clean     as synthesised;
  dropped   its sentences after the first replaced by silence of the same length (a take
            that skips sentences);
  swapped   another segment's audio (a take that speaks the wrong text);

and each time compared with the segment's text (word error rate, workers.book.alignment). The
flag rule is the platform's: a segment more than VERIFY_WER_MARGIN above the median of the
clean segments (the job's median, in a job that is mostly clean). Reported: the share of
corrupted segments caught, of clean ones flagged, and the recogniser's CPU time per audio
second (one thread, decoding plus its per-segment language model). This harness leaves out
the platform (queues, storage, the process pool): `bench.longform` has a job with verify.

    python -m bench.verify [--sentences 3]
"""

import argparse
import statistics
import time
from typing import Any

import numpy as np

from bench.align import TEXT
from bench.common import save, table


def main() -> None:
    """Synthesise, corrupt, hear back; print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=3, help="sentences per segment")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a PocketSphinx option for the recogniser (repeatable), e.g. "
                             "fwdflat=no")
    args = parser.parse_args()

    from core import hearing
    from core.hearing import word_error_rate
    from core.normalize import spoken
    from core.text import sentences
    from workers.aligners import words_of
    from workers.aligners.sphinx import SphinxAligner
    from workers.book.alignment import verification
    from workers.engines import SpeechRequest
    from workers.runtime.engine import get_engine
    from workers.settings import get_settings

    options = {name: _value(v) for name, v in (o.split("=", 1) for o in args.option)}
    hearing.RECOGNIZER_OPTIONS.update(options)
    said = [spoken(s, "en") for s in sentences(" ".join(TEXT.split()), "en")]
    engine = get_engine()
    voice, rate = engine.info.voices[0].id, engine.sample_rate
    clips = engine.synthesize([SpeechRequest(text=s, voice=voice) for s in said])
    groups = [list(range(first, min(first + args.sentences, len(said))))
              for first in range(0, len(said), args.sentences)]
    groups = [g for g in groups if len(g) > 1]  # "dropped" needs a sentence to keep
    texts = [" ".join(said[k] for k in g) for g in groups]
    audio = [np.concatenate([clips[k] for k in g]) for g in groups]
    recognizer = SphinxAligner()
    recognizer.transcribe(audio[0], rate, texts[0])  # build the decoders outside the timing
    spent, heard_s = 0.0, 0.0

    def wer(clip: np.ndarray, text: str) -> float:
        nonlocal spent, heard_s
        began = time.perf_counter()
        heard = recognizer.transcribe(clip, rate, text)
        spent += time.perf_counter() - began
        heard_s += len(clip) / rate
        return word_error_rate(words_of(text), [w.word for w in heard or []])

    rates: dict[str, list[float]] = {"clean": [], "dropped": [], "swapped": []}
    for n, (g, clip, text) in enumerate(zip(groups, audio, texts, strict=True)):
        rates["clean"].append(wer(clip, text))
        dropped = clip.copy()
        dropped[len(clips[g[0]]):] = 0.0
        rates["dropped"].append(wer(dropped, text))
        rates["swapped"].append(wer(audio[(n + 1) % len(audio)], text))
    margin = get_settings().verify_wer_margin
    threshold = verification(dict(enumerate(rates["clean"])), margin)["threshold"]
    rows = []
    for kind, values in rates.items():
        flagged = sum(v > threshold for v in values)
        rows.append([kind, len(values), f"{statistics.median(values):.2f}",
                     f"{min(values):.2f} to {max(values):.2f}",
                     f"{flagged} of {len(values)}" + (" caught" if kind != "clean"
                                                      else " flagged wrongly")])
    print(f"Recognition check, PocketSphinx against each segment's own words"
          f"{' with ' + ' '.join(args.option) if args.option else ''}, Piper "
          f"({engine.info.id}), {len(groups)} segments of {args.sentences} sentences; flag "
          f"above the clean median + {margin} = {threshold}")
    print(table(["take", "segments", "median WER", "range", "flagged"], rows))
    print(f"recognition: {spent / heard_s * 1000:.1f} ms CPU per audio second "
          f"({heard_s:.0f} s of audio, one thread)")
    result: dict[str, Any] = {"segments": len(groups), "per_segment": args.sentences,
                              "options": options,
                              "threshold": threshold, "wer": rates,
                              "ms_per_audio_second": spent / heard_s * 1000}
    save("verify", result)


def _value(text: str) -> Any:
    """A PocketSphinx option's value: yes/no as booleans, numbers as numbers."""
    if text in ("yes", "no"):
        return text == "yes"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


if __name__ == "__main__":
    main()
