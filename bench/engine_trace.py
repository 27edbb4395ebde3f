"""Where a realtime request's first audio goes inside vLLM-Omni, from an engine trace.

Run a GPU bench with NARRATOR_ENGINE_TRACE=FILE (workers/engines/trace.py; bench/gpu_run.sh
sets it with TRACE=1), then:

    python -m bench.engine_trace FILE [FILE...]

One row per realtime request that reached first audio, then the median, p90 and max of each
column (ms):
  admit     submit -> the talker schedules its prefill (only with the talker scheduler)
  frame1    submit -> the talker's hand-off gets its first frame
  step      first -> second frame: a talker step as this request saw it
  to_c2w    first frame -> Code2Wav's scheduler sees the chunk
  c2w_wait  chunk seen -> Code2Wav schedules it
  c2w_run   scheduled -> that step's output
  back      Code2Wav's output -> the adapter has audio (the orchestrator and the loop)
  total     submit -> first audio
and Code2Wav's steps: period between steps, tokens and requests per step; and the talker's
steps: how many admitted new requests (a prefill beside the decodes), and the time to the
next step after those and after decode-only ones. Times are wall clock from several
processes of one machine.
"""

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

COLUMNS = ("admit", "frame1", "step", "to_c2w", "c2w_wait", "c2w_run", "back", "total")


def load(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Read every event line of the trace files, in time order."""
    events = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return sorted(events, key=lambda e: e["t"])


def first(events: list[dict[str, Any]], rid: str, name: str, after: float = 0.0,
          key: str = "rid", nth: int = 0) -> float | None:
    """Return the time of the nth event `name` at or after `after` that names request `rid`."""
    seen = 0
    for e in events:
        if e["ev"] != name or e["t"] < after:
            continue
        value = e.get(key)
        names = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and rid in v for v in names):
            if seen == nth:
                return float(e["t"])
            seen += 1
    return None


def breakdown(events: list[dict[str, Any]]) -> list[dict[str, float | None]]:
    """One row of stage times (ms) per realtime request that reached first audio."""
    rows = []
    for submit in (e for e in events if e["ev"] == "submit"):
        rid, t0 = submit["rid"], submit["t"]
        done = first(events, rid, "first_audio", t0)
        if done is None:
            continue
        admit = first(events, rid, "talker_step", t0, key="admitted")
        frame1 = first(events, rid, "talker_frame", t0)
        frame2 = first(events, rid, "talker_frame", t0, nth=1)
        ready = first(events, rid, "c2w_ready", t0)
        sched = first(events, rid, "c2w_step", ready or t0, key="rt")
        out = first(events, rid, "c2w_out", sched or t0, key="rt")

        def ms(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round((b - a) * 1000, 1)

        rows.append({"rid": rid, "admit": ms(t0, admit), "frame1": ms(t0, frame1),
                     "step": ms(frame1, frame2), "to_c2w": ms(frame1, ready),
                     "c2w_wait": ms(ready, sched), "c2w_run": ms(sched, out),
                     "back": ms(out, done), "total": ms(t0, done)})
    return rows


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """Median, p90 and max."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return statistics.median(ordered), p90, ordered[-1]


def code2wav_steps(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Code2Wav's step period, tokens and requests per step."""
    steps = [e for e in events if e["ev"] == "c2w_step"]
    by_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in steps:
        by_pid[e.get("pid", 0)].append(e)
    periods = [(b["t"] - a["t"]) * 1000 for s in by_pid.values() for a, b in pairwise(s)
               if b["t"] - a["t"] < 1.0]  # steps of one burst, not idle gaps
    return {"steps": len(steps), "period_ms": periods, "tokens": [e["tokens"] for e in steps],
            "requests": [e["requests"] for e in steps]}


def talker_steps(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The talker's steps (traced by Narrator's talker scheduler): how many admitted new
    requests (a prefill beside everyone's decode), the batch, and the time from one step's
    scheduling to the next, after a step that admitted and after one that did not."""
    steps = [e for e in events if e["ev"] == "talker_step" and "new" in e]
    mixed: list[float] = []
    clean: list[float] = []
    for a, b in pairwise(steps):
        if b["t"] - a["t"] < 1.0 and a.get("pid") == b.get("pid"):
            (mixed if a["new"] else clean).append((b["t"] - a["t"]) * 1000)
    span = steps[-1]["t"] - steps[0]["t"] if len(steps) > 1 else 0.0
    return {"steps": len(steps), "admitting": sum(1 for e in steps if e["new"]),
            "requests": [e["requests"] for e in steps], "mixed_ms": mixed, "clean_ms": clean,
            "frames_per_s": sum(e["requests"] for e in steps) / span if span else 0.0}


def report(paths: list[str]) -> str:
    """Return the table for the trace files."""
    events = load(paths)
    rows = breakdown(events)
    lines = [" ".join(f"{c:>9}" for c in COLUMNS)]
    for row in rows:
        lines.append(" ".join(f"{'-' if row[c] is None else row[c]:>9}" for c in COLUMNS))
    lines.append("")
    for label, pick in (("median", 0), ("p90", 1), ("max", 2)):
        cells = []
        for c in COLUMNS:
            values = [v for r in rows if isinstance(v := r[c], float)]
            cells.append(f"{quantiles(values)[pick]:>9.1f}" if values else f"{'-':>9}")
        lines.append(" ".join(cells) + f"  {label}")
    c2w = code2wav_steps(events)
    if c2w["period_ms"]:
        period, tokens = quantiles(c2w["period_ms"]), quantiles([float(t) for t in c2w["tokens"]])
        lines.append(f"Code2Wav: {c2w['steps']} steps; period median {period[0]:.1f} ms, p90 "
                     f"{period[1]:.1f}, max {period[2]:.1f}; tokens per step median "
                     f"{tokens[0]:.0f}, p90 {tokens[1]:.0f}, max {tokens[2]:.0f}")
    talker = talker_steps(events)
    if talker["mixed_ms"] or talker["clean_ms"]:
        def median(values: list[float]) -> str:
            return f"{statistics.median(values):.1f}" if values else "-"
        lines.append(
            f"Talker: {talker['steps']} steps, {talker['admitting']} admitting new requests "
            f"({talker['admitting'] / talker['steps']:.0%}); requests per step median "
            f"{statistics.median(talker['requests']):.0f}; to the next step, median: "
            f"{median(talker['mixed_ms'])} ms after an admitting step, "
            f"{median(talker['clean_ms'])} ms after a decode-only one; "
            f"{talker['frames_per_s']:.0f} frames/s")
    lines.append(f"{len(rows)} realtime requests")
    return "\n".join(lines)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    print(report(parser.parse_args().files))


if __name__ == "__main__":
    main()
