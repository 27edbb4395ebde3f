"""Long-form jobs: platform throughput against the raw engine, planning, assembly memory.

1. throughput: a ~20,000-character, 4-chapter text as a job through `narrator serve`
   (embedded: SQLite, file broker, Piper, local media), from submit to `completed`, in
   audio-seconds per wall-second; divided by the bare engine (Piper as shipped, ONNX
   Runtime's defaults) looping over the same planned segments (spoken form) in one process,
   in the same run (target >= 0.95), and by Piper at its best on this host (a segment per
   core at once, one intra-op thread each, as the worker runs it). The job asks for
   SRT, so its segments get word times (ALIGN_WORDS: from Piper's own phoneme durations,
   forced alignment where those do not place them); the last format runs again with the
   recognition check (verify "flag"), and without alignment; MP3 once more with ACX
   mastering (mastering.py: no MP3 fragments ahead, every chapter file measured).
2. planning: `plan_pieces` over a 2,000,000-character text: wall time and peak Python memory.
3. assembly: peak resident memory of a process that assembles a long job (synthetic parts
   in a local media folder) into one MP3 and per-chapter files, against the size of its
   audio as float32: assembly streams, so the peak must stay far below the audio's size.

    python -m bench.longform [--chars 20000] [--plan-chars 2000000] [--assembly-hours 1]
                             [--only mp3 'mp3, acx']   # those job rows only, nothing saved
                             [--env NARRATOR_ALIGN_PROCESSES=2]  # a setting for every job
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

from bench.common import busiest_threads, save, served, table, thread_cpu
from workers.settings import cores

PARAGRAPHS = [
    "The ferry left the harbour at dawn, and the gulls followed it out past the breakwater. "
    "Nobody on deck said much; the passengers watched the town shrink into a line of roofs.",
    "By 9:30 the fog had lifted. Dr. Alvarez counted 14 crates on the manifest, though the "
    "hold held only 12, and she wrote the difference down in the margin of her notebook.",
    "Her brother had warned her about the crossing in March 1998, when the storm had kept "
    "them at sea for two days. \u201cIt is never the wind,\u201d he said, "
    "\u201cit is the tide.\u201d",
    "In the afternoon the island came into view: a low green hump with a white church, a "
    "jetty, and a road that wound up between stone walls toward the lighthouse.",
]


def book(chars: int, chapters: int = 4) -> list[dict[str, str]]:
    """Return `chapters` chapters of varied prose totalling about `chars` characters."""
    per_chapter, out = chars // chapters, []
    for c in range(chapters):
        paragraphs, size, n = [], 0, c
        while size < per_chapter:
            paragraph = PARAGRAPHS[n % len(PARAGRAPHS)].replace("14", str(10 + n % 40))
            paragraphs.append(paragraph)
            size += len(paragraph) + 2
            n += 1
        out.append({"title": f"Chapter {c + 1}", "input": "\n\n".join(paragraphs)})
    return out


def raw_engine(chapters: list[dict[str, str]], threads: int = 1
               ) -> tuple[float, float, int, dict[str, Any]]:
    """Piper alone over the job's planned segments: the bare engine as shipped (ONNX
    Runtime's defaults, every core on one segment) one segment at a time, or with `threads`
    > 1 that many at once on one single-threaded session (bench.piper_parallel). Return wall
    s, audio s, segments and the host's CPU meanwhile (bench.common.busiest_threads)."""
    from bench.piper_parallel import planned, run, speak
    from workers.engines.piper import load_voice

    texts = planned(chapters)
    voice = load_voice() if threads == 1 else load_voice(intra_op_threads=1)
    speak(voice, "Warm up.")
    before = thread_cpu()
    result = run(voice, texts, threads, snapshot=thread_cpu)
    return (result["wall_s"], result["audio_s"], len(texts),
            busiest_threads(before, result["snapshot"], result["wall_s"], top=6))


def platform(chapters: list[dict[str, str]], fmt: str, env: dict[str, str] | None = None,
             extra: dict[str, Any] | None = None
             ) -> tuple[float, float, int, dict[str, Any], float, dict[str, Any]]:
    """Submit the job to `narrator serve`; return wall s to completed, audio s, segments,
    the manifest, the s from the poll that first saw every segment done to the one that
    saw `completed` (the assembly's tail, within the 0.2 s poll), and the host's CPU from
    submit to completed by process and thread (bench.common.busiest_threads)."""
    with served(env) as url, httpx.Client(base_url=url, timeout=60) as http:
        warm = http.post("/v1/audio/jobs", json={"input": "Warm up."}).json()["id"]
        while http.get(f"/v1/audio/jobs/{warm}").json()["status"] != "completed":
            time.sleep(0.1)
        start, before = time.perf_counter(), thread_cpu()
        job = http.post("/v1/audio/jobs", json={"chapters": chapters, "response_format": fmt,
                                                "subtitles": ["srt"]} | (extra or {})).json()
        all_done = None
        while job["status"] not in ("completed", "failed"):
            time.sleep(0.2)
            job = http.get(f"/v1/audio/jobs/{job['id']}").json()
            if all_done is None and job["segments"]["total"] and \
                    job["segments"]["done"] == job["segments"]["total"]:
                all_done = time.perf_counter()
        wall = time.perf_counter() - start
        cpu = busiest_threads(before, thread_cpu(), wall, top=6)
        tail = time.perf_counter() - (all_done or time.perf_counter())
        if job["status"] != "completed":
            raise RuntimeError(json.dumps(job["error"]))
        manifest = http.get(job["result"]["manifest_url"]).json()
    speech = sum(s["duration_seconds"] for s in manifest["segments"])  # as raw: no silences
    return wall, speech, job["segments"]["total"], manifest, tail, cpu


def cpu_row(label: str, audio: float, cpu: dict[str, Any]) -> list[Any]:
    """One row of the CPU table: core-seconds in all and per audio-second, the busiest
    processes and threads."""
    core_s = cpu["host_cores"] * cpu["seconds"]
    return [label, f"{cpu['host_cores']:.2f}", f"{core_s:.1f}", f"{core_s / audio:.3f}",
            "; ".join(f"{k} {v:.2f}" for k, v in list(cpu["processes"].items())[:4]),
            "; ".join(f"{k.split('/')[-1]} {v:.2f}" for k, v in list(cpu["threads"].items())[:4])]


def planning(chars: int) -> dict[str, Any]:
    """Plan a text of `chars` characters; return time, segments and peak traced memory."""
    from core.text import Gaps, plan_pieces

    chapters = [c["input"] for c in book(chars, chapters=40)]
    total = sum(len(c) for c in chapters)
    tracemalloc.start()
    start = time.perf_counter()
    segments = sum(1 for _ in plan_pieces(chapters, 400, Gaps(0.25, 0.6, 1.5)))
    wall = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"chars": total, "segments": segments, "seconds": wall,
            "peak_mib_beyond_input": peak / 2**20, "input_mib": total / 2**20}


RATE, PART_SECONDS = 24000, 20


def write_parts(folder: str, hours: float) -> None:
    """Write synthetic parts (a 220 Hz tone) for `hours` of audio into `folder`."""
    import numpy as np

    from storage import MediaStore
    from workers.book import parts

    store = MediaStore(f"file://{folder}")
    tone = 0.2 * np.sin(np.arange(RATE * PART_SECONDS) * 2 * np.pi * 220 / RATE)
    for n in range(int(hours * 3600 / PART_SECONDS)):
        store.put(f"p/{n:06d}.wav", parts.part_bytes(tone.astype(np.float32), RATE))


def assembly_child(folder: str, hours: float) -> None:
    """In a fresh process: assemble the parts in `folder`; print peak RSS against baseline."""
    import uuid

    from models import Job, Segment
    from storage import MediaStore
    from workers.book import assembly

    parts = int(hours * 3600 / PART_SECONDS)
    store = MediaStore(f"file://{folder}")
    job = Job(id=uuid.uuid4(), model="piper", voice="joe", response_format="mp3",
              speed=1.0, options={"language": "en"}, input_characters=0,
              chapters=[{"title": f"Part {n + 1}", "input": ""} for n in range(4)])
    segments = [Segment(index=n, chapter=n * 4 // parts, text="A sentence here.",
                        samples=RATE * PART_SECONDS, pause_after=0.25, attempts=1)
                for n in range(parts)]
    before, peak, done = rss_mib(), [0.0], threading.Event()

    def sample() -> None:  # the high-water mark of ru_maxrss may date from the imports
        while not done.wait(0.02):
            peak[0] = max(peak[0], rss_mib())

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    assembly.assemble(job, segments, store, store, lambda s: f"p/{s.index:06d}.wav", -16.0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    audio_mib = parts * PART_SECONDS * RATE * 4 / 2**20
    print("RESULT " + json.dumps({"parts": parts, "audio_hours": hours, "seconds": wall,
                                  "rss_before_mib": before, "rss_peak_mib": peak[0],
                                  "audio_float32_mib": audio_mib}))


def rss_mib() -> float:
    """Return this process's resident memory now (Linux /proc)."""
    fields = Path("/proc/self/status").read_text().split("VmRSS:")[1].split()
    return int(fields[0]) / 1024


def assembly_memory(hours: float) -> dict[str, Any]:
    """Write the parts in one process, then assemble them in a fresh one."""
    env = os.environ | {"NARRATOR_LOG_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory(prefix="narrator-asm-") as folder:
        subprocess.run([sys.executable, "-m", "bench.longform", "--write-parts", folder,
                        str(hours)], check=True, env=env)
        out = subprocess.run([sys.executable, "-m", "bench.longform", "--assembly-child",
                              folder, str(hours)], capture_output=True, text=True, check=True,
                             env=env).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[7:]))


def main() -> None:
    """Run the three measurements and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--formats", nargs="+", default=["wav", "mp3"])
    parser.add_argument("--only", nargs="+", help="run only these rows (their JSON keys: "
                        "wav, mp3, 'mp3, verify flag', 'mp3, no alignment', 'mp3, acx')")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for `narrator serve` in every job row (repeatable)")
    parser.add_argument("--plan-chars", type=int, default=2_000_000)
    parser.add_argument("--assembly-hours", type=float, default=1.0)
    parser.add_argument("--assembly-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--write-parts", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.assembly_child:
        assembly_child(args.assembly_child[0], float(args.assembly_child[1]))
        return
    if args.write_parts:
        write_parts(args.write_parts[0], float(args.write_parts[1]))
        return

    chapters = book(args.chars)
    chars = sum(len(c["input"]) for c in chapters)
    raw_wall, raw_audio, raw_segments, raw_cpu = raw_engine(chapters)
    raw_rate = raw_audio / raw_wall
    # The same segments on every core at once, one thread each: Piper at its best here.
    best_wall, best_audio, _, best_cpu = raw_engine(chapters, cores())
    best_rate = best_audio / best_wall
    cpu_rows = [cpu_row("raw Piper loop", raw_audio, raw_cpu),
                cpu_row(f"raw Piper, {cores()} at once", best_audio, best_cpu)]
    rows = [["raw Piper loop, one process", raw_segments, f"{raw_audio:.1f}", f"{raw_wall:.1f}",
             f"{raw_rate:.2f}", "1.000", "", ""],
            [f"raw Piper, {cores()} segments at once, one thread each", raw_segments,
             f"{best_audio:.1f}", f"{best_wall:.1f}", f"{best_rate:.2f}",
             f"{best_rate / raw_rate:.3f}", "1.000", ""]]
    results: dict[str, Any] = {"chars": chars, "raw": {"wall_s": raw_wall,
                                                       "audio_s": raw_audio},
                               "raw_parallel": {"wall_s": best_wall, "audio_s": best_audio,
                                                "threads": cores()}}
    # Jobs with subtitles get word times (ALIGN_WORDS, the default): the
    # last format runs again with the recognition check (verify "flag") and without
    # alignment, to show what each costs.
    last = args.formats[-1]
    # (key in the JSON: bench.all reads "wav" and "mp3", row label, format, env, body)
    runs: list[tuple[str, str, str, dict[str, str], dict[str, Any]]] = [
        (fmt, f"{fmt} + srt, word times", fmt, {}, {}) for fmt in args.formats] + [
        (f"{last}, verify flag", f"{last} + srt, word times, verify flag", last, {},
         {"verify": "flag"}),
        (f"{last}, no alignment", f"{last} + srt, estimated cues", last,
         {"NARRATOR_ALIGN_WORDS": "false"}, {}),
        ("mp3, acx", "mp3 + srt, word times, ACX mastering", "mp3", {}, {"mastering": "acx"})]
    mastered: list[dict[str, Any]] = []
    for key, label, fmt, env, extra in runs:
        if args.only and key not in args.only:
            continue
        env = dict(item.split("=", 1) for item in args.env) | env
        wall, audio, segments, manifest, tail, cpu = platform(chapters, fmt, env, extra)
        cpu_rows.append(cpu_row(label, audio, cpu))
        mastered += manifest["checks"].get("mastering", {}).get("chapters", [])
        rate = audio / wall
        rows.append([f"job via narrator serve ({label})", segments, f"{audio:.1f}",
                     f"{wall:.1f}", f"{rate:.2f}", f"{rate / raw_rate:.3f}",
                     f"{rate / best_rate:.3f}", f"{tail:.1f}"])
        results[key] = {"wall_s": wall, "audio_s": audio, "ratio": rate / raw_rate,
                        "ratio_best": rate / best_rate, "tail_s": tail, "cpu": cpu}
    results["raw"]["cpu"] = raw_cpu
    print(f"{chars} characters in {len(chapters)} chapters, Piper on {os.cpu_count()} CPUs; "
          "audio s = speech only (the job's planned silences are not counted)")
    print(table(["path", "segments", "audio s", "wall s", "audio-s/s", "÷ raw loop",
                 f"÷ raw {cores()} at once", "last segment → completed, s"], rows))
    print("\nThe host's CPU meanwhile (cores in use on average; core-seconds in all and per "
          "audio-second; the busiest processes and threads, in cores):")
    print(table(["path", "cores", "core-s", "core-s per audio-s", "processes", "threads"],
                cpu_rows))
    if mastered:
        print("\nACX mastering, each chapter file as the manifest measured it "
              "(RMS -23..-18, peak <= -3, floor <= -60, lead 0.5-1 s, tail 1-5 s):")
        print(table(["chapter", "RMS dB", "peak dB", "floor dB", "lead s", "tail s", "format",
                     "ok"], [[c["title"], c["rms_db"], c["peak_db"], c["noise_floor_db"],
                              c["lead_seconds"], c["tail_seconds"],
                              f"{c['sample_rate']} Hz {c['kbps']} kbps "
                              f"{'CBR' if c['constant_bitrate'] else 'VBR'}", c["ok"]]
                             for c in mastered]))
        results["acx_chapters"] = mastered

    if args.only:  # some rows only: nothing saved (bench.all reads the whole run)
        return
    plan = planning(args.plan_chars)
    print(f"\nplanning {plan['chars']:,} characters: {plan['segments']:,} segments in "
          f"{plan['seconds']:.1f} s, peak {plan['peak_mib_beyond_input']:.1f} MiB traced "
          f"(input {plan['input_mib']:.1f} MiB)")
    asm = assembly_memory(args.assembly_hours)
    print(f"assembling {asm['audio_hours']} h ({asm['parts']} parts) to MP3 + chapters: "
          f"{asm['seconds']:.1f} s, peak RSS {asm['rss_peak_mib']:.0f} MiB, "
          f"{asm['rss_peak_mib'] - asm['rss_before_mib']:.0f} MiB above the process's baseline "
          f"(the audio as float32 is {asm['audio_float32_mib']:.0f} MiB)")
    save("longform", results | {"planning": plan, "assembly": asm})


if __name__ == "__main__":
    main()
