"""How many MP3 fragments one assembly process encodes a second, and what bounds it.

On the GPU, segments of one length finish in lockstep waves: on two H100s two
GPU workers finished 128 segments of 20 s within about a second, and the one assembly worker
(a thread per core, 32) then encoded their fragments at about 25 a second, each task taking
1.1-1.4 s against 0.3-0.4 s alone: 2.9 s of backlog after the last segment, which the job
waits for. This harness measures that ceiling without a GPU.

A harness, not the product: it plans a real MP3 job on Postgres (a sentence of about
280 characters a segment), stores N + 1 parts of --seconds of a tone at 24 kHz through
`pipeline.synthesize` with a tone engine at the engine boundary (the last part is left
pending, so no assembly starts), then runs what `narrator.encode_fragment` runs
(`workers.book.progressive.encode_fragment`: the rows, the parts, loudness, the MP3 encode, the
kept fragment) for the N fragments at once on T threads of this process, as the assembly
worker's pool does. It leaves out the broker. With py-spy (--gil, the default when it is on
PATH), the same fragments once more while py-spy samples the threads that hold the GIL: the
GIL-held milliseconds per fragment bound one process at any core count to 1,000 / ms
fragments a second. A second table times one encode alone and beside two threads running
Python: MP3 through a BytesIO and through `core.audio.encode` (a file descriptor), and AAC.

    python -m bench.fragments [--fragments 64] [--seconds 20] [--threads 1 0] [--no-gil]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import PG_URL, save, table

RATE = 24_000  # Qwen3-TTS's rate: the GPU workers' parts


class Tone:
    """An engine at the engine boundary: every request gets SECONDS of a 200 Hz tone."""

    def __init__(self, seconds: float) -> None:
        from core.catalog import catalog
        from core.settings import CoreSettings

        self.info = catalog(CoreSettings())[0]
        t = np.arange(int(seconds * RATE)) / RATE
        self.audio = (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)

    @property
    def sample_rate(self) -> int:
        return RATE

    def start(self) -> None:
        """Nothing to start."""

    def synthesize(self, requests: list[Any]) -> list[Any]:
        return [self.audio for _ in requests]


def done_job(fragments: int, seconds: float) -> uuid.UUID:
    """Plan an MP3 job of fragments + 1 segments and store all parts but the last."""
    import json

    from sqlalchemy import text

    from models.db import session_scope
    from workers.jobs import pipeline

    job_id = uuid.uuid4()
    # About 280 characters a sentence, a segment each: what 20 s of speech holds, so the
    # quality check takes the tone for speech of the right length.
    words = " ".join(["and the narrator reads on through the long quiet evening"] * 4)
    chapter = " ".join(f"Sentence number {n} begins here {words}." for n in range(fragments + 1))
    with session_scope() as session:
        session.execute(text(
            "INSERT INTO jobs (id, owner, status, model, voice, response_format, speed, options,"
            " chapters, metadata, input_characters, segments_total, segments_done,"
            " segments_failed, audio_seconds, created_at, updated_at, chars_done) VALUES"
            " (:id, '', 'queued', 'piper', 'joe', 'mp3', 1.0, '{}', :chapters, '{}',"
            " :chars, 0, 0, 0, 0, now(), now(), 0)"),
            {"id": job_id, "chars": len(chapter),
             "chapters": json.dumps([{"title": "One", "input": chapter}])})
    _, ids = pipeline.plan(job_id)
    assert len(ids) == fragments + 1, f"planned {len(ids)} segments"
    tone = Tone(seconds)
    for segment_id in ids[:-1]:
        pipeline.synthesize(segment_id, engine=tone)  # type: ignore[arg-type]
    return job_id


def encode_all(job_id: uuid.UUID, fragments: int, threads: int) -> tuple[float, float]:
    """Encode the job's fragments on `threads` at once; return (wall s, CPU s)."""
    from workers.book import progressive

    cpu, started = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        encoded = list(pool.map(lambda n: progressive.encode_fragment(job_id, n),
                                range(fragments)))
    wall = time.perf_counter() - started
    assert all(encoded), f"{encoded.count(False)} fragments were not encoded"
    return wall, time.process_time() - cpu


def gil_seconds(job_id: uuid.UUID, fragments: int, threads: int, spy: str,
                folder: Path) -> tuple[float, float]:
    """Encode under py-spy's GIL sampling (100 Hz); return (wall s, GIL-held s)."""
    out = folder / "gil.txt"
    sampler = subprocess.Popen(
        [spy, "record", "-p", str(os.getpid()), "-r", "100", "-f", "raw", "--gil",
         "--nonblocking", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.0)  # py-spy attaches
    wall, _ = encode_all(job_id, fragments, threads)
    sampler.send_signal(2)  # ^C: py-spy writes what it sampled
    sampler.wait(60)
    samples = sum(int(line.rsplit(" ", 1)[1]) for line in out.read_text().splitlines()
                  if line.strip() and _in_encode(line))
    return wall, samples / 100


def contention(seconds: float, spinners: int = 2, reps: int = 3) -> dict[str, float]:
    """Seconds one encode of `seconds` takes while `spinners` threads run Python: MP3 through
    a BytesIO (libsndfile calls back into Python, taking the GIL, per write) and through
    core.audio.encode (a temporary file's descriptor: no callbacks); AAC through encode
    (PyAV, a BytesIO)."""
    import io
    import threading

    from core.audio import encode, encode_to

    audio = Tone(seconds).audio
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    def streamed() -> bytes:
        buffer = io.BytesIO()
        encode_to([audio], RATE, "mp3", buffer)
        return buffer.getvalue()

    out: dict[str, float] = {}
    for name, run in (("MP3, BytesIO", streamed),
                      ("MP3, descriptor (encode)", lambda: encode(audio, RATE, "mp3")),
                      ("AAC, BytesIO (encode)", lambda: encode(audio, RATE, "aac"))):
        for beside in (0, spinners):
            stop.clear()
            threads = [threading.Thread(target=spin) for _ in range(beside)]
            for thread in threads:
                thread.start()
            started = time.perf_counter()
            for _ in range(reps):
                run()
            seconds = (time.perf_counter() - started) / reps
            out[f"{name}: {'beside' if beside else 'alone'}"] = seconds
            stop.set()
            for thread in threads:
                thread.join()
    return out


def _in_encode(stack: str) -> bool:
    return "encode_fragment" in stack  # the pool's threads at work, not the sleep above


def main() -> None:
    """Run the harness and print its table."""
    from core import logs
    from workers.settings import cores

    logs.configure("WARNING")  # not a line per fragment

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fragments", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                        help="0: a thread per core, as the assembly worker runs")
    parser.add_argument("--gil", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--database-url", default=PG_URL)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="narrator-fragments-"))
    name = f"narrator_bench_{uuid.uuid4().hex[:8]}"
    admin_url = args.database_url
    from sqlalchemy import text

    from migrations import upgrade
    from models.db import sql_engine_for

    admin = sql_engine_for(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    database = admin_url.rsplit("/", 1)[0] + f"/{name}"
    os.environ |= {"NARRATOR_DATABASE_URL": database, "NARRATOR_DATA_DIR": str(folder)}
    rows, results = [], []
    try:
        upgrade(database)
        for threads in [t or cores() for t in args.threads]:
            job_id = done_job(args.fragments, args.seconds)
            wall, cpu = encode_all(job_id, args.fragments, threads)
            rate = args.fragments / wall
            results.append({"threads": threads, "wall_s": wall, "cpu_s": cpu,
                            "fragments_per_s": rate})
            rows.append([threads, args.fragments, f"{wall:.2f}", f"{rate:.1f}",
                         f"{rate * args.seconds:.0f}", f"{1000 * cpu / args.fragments:.0f}",
                         f"{cpu / wall:.2f}", "–", "–"])
        spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        if args.gil and spy:
            threads = cores()
            job_id = done_job(args.fragments, args.seconds)
            wall, held = gil_seconds(job_id, args.fragments, threads, spy, folder)
            per = 1000 * held / args.fragments
            results.append({"threads": threads, "gil": True, "wall_s": wall, "gil_s": held,
                            "gil_ms_per_fragment": per})
            rows.append([f"{threads}, py-spy --gil", args.fragments, f"{wall:.2f}",
                         f"{args.fragments / wall:.1f}", "–", "–", "–", f"{per:.0f}",
                         f"{1000 / max(per, 1e-9):.0f}"])
    finally:
        from models.db import reset_sessionmaker

        reset_sessionmaker()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"MP3 fragments of {args.seconds:g} s at {RATE} Hz, encoded at once in one process "
          f"({cores()} cores)")
    print(table(["threads", "fragments", "wall s", "fragments/s", "audio-s/s",
                 "CPU ms each", "cores busy", "GIL-held ms each", "GIL ceiling fragments/s"],
                rows))
    waits = contention(args.seconds)
    names = dict.fromkeys(key.split(": ")[0] for key in waits)
    print(f"\none encode of {args.seconds:g} s, alone and beside 2 threads running Python (s):")
    print(table(["format, written through", "alone", "beside 2 Python threads"],
                [[name, f"{waits[f'{name}: alone']:.2f}", f"{waits[f'{name}: beside']:.2f}"]
                 for name in names]))
    save("fragments", {"fragments": args.fragments, "seconds": args.seconds,
                       "results": results, "contention_s": waits})


if __name__ == "__main__":
    main()
