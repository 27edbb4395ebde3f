"""GPU engine throughput: raw AsyncOmni vs the Narrator adapter vs a real Celery worker.

Runs on a CUDA machine with vLLM-Omni (see ../shared/gpu/RECIPE.md). One engine is started
and shared by all three paths, so they are compared in one run on the same GPU state:

  (a) raw:     N concurrent AsyncOmni.generate() calls on the engine's loop, recipe-style
               prompts, stage-0 max_tokens = min_tokens = FRAMES, final output only;
      raw_staggered / raw_jitter: the same, the first N started --stagger-ms apart / each
               request FRAMES - [0, --jitter] frames long, so that requests start and end
               at different steps as a worker's segments do;
  (b) adapter: N threads each calling VllmOmniEngine.synthesize(), as Celery's threads pool
               drives it;
  (c) worker:  an in-process Celery worker (threads pool, embedded filesystem broker,
               SQLite) consuming N `narrator.synthesize` segment tasks, parts written as float WAV.

With --process-paths, the engine is then closed and started again in a child process of its
own (NARRATOR_VLLM_ENGINE_PROCESS, the worker's default), and those paths run again against
it, reported as `<path>_proc`: same run, same GPU, compared with the raw rate above.

Also the time to the first audio chunk of a streamed sync request, alone and under load.
Audio-seconds per wall-second are from measured samples, not nominal lengths.

    python -m bench.gpu_engine --model DIR --frames 250 --concurrency 1 4 16 64

bench/gpu_suite.sh runs the whole set of issue-3 measurements (test, table, tuning).
"""

import argparse
import asyncio
import collections
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import GpuBusy
from workers.engines import trace

TEXTS = [
    "She said she would be here by noon, and then we would all leave together for the station.",
    "The quick brown fox jumps over the lazy dog while the band keeps playing in the park.",
    "Please remember to bring your umbrella tomorrow, because the forecast says it will rain.",
    "I really did not expect the meeting to run so long, but we finally reached a decision.",
]
SR = 24000


def gpu_memory() -> str:
    """Return nvidia-smi's memory.used, or '?'."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def worker_timeline(calls: list[tuple[float, float]], start: float, wall: float,
                    slots: int) -> dict[str, Any]:
    """Where a worker's wall time went: filling the engine, keeping it full, the tail.

    fill_s: until `slots` engine calls had started; occupancy: the mean of min(engine calls
    open, slots) over the wall time, divided by `slots` (1.0: the engine never lacked work);
    tail_s: from the last engine call's end to the last segment's row marked done.
    """
    begins = sorted(b for b, _ in calls)
    edges = sorted([(b, 1) for b, _ in calls] + [(e, -1) for _, e in calls])
    busy, open_calls, last = 0.0, 0, start
    for t, step in edges:
        busy += min(open_calls, slots) * (t - last)
        open_calls, last = open_calls + step, t
    return {"tag": "worker_timeline", "calls": len(calls),
            "fill_s": round(begins[min(slots, len(begins)) - 1] - start, 3) if begins else None,
            "occupancy": round(busy / (wall * slots), 3),
            "tail_s": round(start + wall - max(e for _, e in calls), 3) if calls else None}


def emit(record: dict[str, Any]) -> None:
    """Print one result line."""
    print("RESULT " + json.dumps(record), flush=True)


class Bench:
    """Holds the engine and runs each path at a given concurrency."""

    def __init__(self, args: argparse.Namespace, engine: Any = None) -> None:
        self.args = args
        if engine is None:
            self.start_engine()
        else:
            self.engine: Any = engine
        self.voice = self.engine.info.voices[0].id if self.engine.info.voices else ""

    def start_engine(self, process: bool = False) -> None:
        """Start the engine the worker will get: in this process, or in a child of its own."""
        from workers.runtime.engine import get_engine, reset_engine
        from workers.settings import get_settings

        os.environ["NARRATOR_VLLM_ENGINE_PROCESS"] = str(process).lower()
        get_settings.cache_clear()
        reset_engine()
        start = time.perf_counter()
        self.engine = get_engine()
        self.engine.start()
        emit({"tag": "engine_start", "process": process,
              "seconds": round(time.perf_counter() - start, 1), "gpu_memory": gpu_memory()})

    def restart_in_process_of_its_own(self) -> None:
        """Close the in-process engine, wait for its GPU memory, start it in a child."""
        self.engine.close()
        for _ in range(120):
            used = gpu_memory().split()[0]
            if used.isdigit() and int(used) < 2000:
                break
            time.sleep(1)
        emit({"tag": "engine_closed", "gpu_memory": gpu_memory()})
        self.start_engine(process=True)

    # (a) raw AsyncOmni, the recipe's way
    def raw_staggered(self, n: int) -> tuple[float, int]:
        """Raw, with the first n requests started --stagger-ms apart, as a worker fills up."""
        return self.raw(n, stagger=self.args.stagger_ms / 1000)

    def raw_jitter(self, n: int) -> tuple[float, int]:
        """Raw, each request's length drawn from [FRAMES - JITTER, FRAMES], a new one started
        as each ends: requests end and start at different steps, as a worker's segments
        do (their texts differ, and some end early), instead of in lockstep waves."""
        return self.raw(n, jitter=self.args.jitter)

    def raw(self, n: int, stagger: float = 0.0, jitter: int = 0) -> tuple[float, int]:
        """Run n x waves requests with at most n in flight."""
        from vllm.sampling_params import RequestOutputKind

        from workers.engines.qwen3_handoff import WHOLE
        from workers.engines.qwen3_tts import multimodal_output, to_samples

        engine, frames = self.engine, self.args.frames
        params = [copy.deepcopy(p) for p in engine._defaults]
        params[0].max_tokens = params[0].min_tokens = frames
        for p in params:
            if hasattr(p, "output_kind"):
                p.output_kind = RequestOutputKind.FINAL_ONLY

        def params_for(i: int) -> list[Any]:
            if not jitter:
                return params
            length = frames - random.Random(i).randint(0, jitter)  # the same in every run
            varied = [copy.deepcopy(p) for p in params]
            varied[0].max_tokens = varied[0].min_tokens = length
            return varied

        def prompt(i: int) -> dict[str, Any]:
            info = {"task_type": ["CustomVoice"], "text": [TEXTS[i % len(TEXTS)]],
                    "language": ["English"], "speaker": [self.voice], "instruct": [""],
                    "max_new_tokens": [frames]}
            if self.args.whole:  # decoded once when done (workers/engines/qwen3_handoff.py)
                info[WHOLE] = [1]
            return {"prompt_token_ids": [0] * engine._prompt_length(info),
                    "additional_information": info}

        async def one(i: int) -> int:
            samples = 0
            request_id = f"raw-{time.time_ns()}-{i}"
            async for out in engine._omni.generate(prompt(i), request_id=request_id,
                                                   sampling_params_list=params_for(i)):
                payload = multimodal_output(out)
                if payload:
                    samples = len(to_samples(payload.get("audio")))
            return samples

        async def batch() -> list[int]:
            gate = asyncio.Semaphore(n)

            async def gated(i: int) -> int:
                if i < n and stagger:
                    await asyncio.sleep(i * stagger)
                async with gate:
                    return await one(i)

            return list(await asyncio.gather(*(gated(i) for i in range(n * self.args.waves))))

        start = time.perf_counter()
        counts = asyncio.run_coroutine_threadsafe(batch(), engine._loop).result()
        wall = time.perf_counter() - start
        frames_each = collections.Counter(round(c / 1920) for c in counts)  # 1920 a frame
        emit({"tag": "raw_lengths", "frames": dict(frames_each.most_common(8))})
        return wall, sum(counts)

    # (b) the adapter, driven by N threads like Celery's threads pool
    def adapter(self, n: int, waves: int = 0) -> tuple[float, int]:
        from workers.engines import SpeechRequest

        counts = [0] * n

        def work(i: int) -> None:
            for wave in range(waves or self.args.waves):
                request = SpeechRequest(text=TEXTS[i % len(TEXTS)], voice=self.voice,
                                        language="en", max_new_tokens=self.args.frames,
                                        request_id=f"adapter-{i}-{wave}")
                counts[i] += len(self.engine.synthesize([request])[0])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start, sum(counts)

    # (c) a real Celery worker consuming segment tasks from the embedded broker
    def start_worker(self, threads: int = 0) -> None:
        """Start a Celery worker in this process (threads pool), as `narrator worker` does."""
        from celery.contrib.testing.worker import start_worker

        from models import Base
        from models.db import sync_sessionmaker
        from workers.app import celery_app

        Base.metadata.create_all(sync_sessionmaker().kw["bind"])
        from core.queues import worker_queues

        self._worker_cm = start_worker(celery_app, pool="threads",
                                       queues=worker_queues([self.engine.info.id]),
                                       # as `narrator worker`: one per engine slot
                                       concurrency=threads or max(self.args.concurrency),
                                       perform_ping_check=False, loglevel="WARNING",
                                       shutdown_timeout=30)
        self._worker_cm.__enter__()

    def worker(self, n: int) -> tuple[float, int]:
        """Enqueue n x waves segment tasks; the worker runs at most its concurrency at once."""
        import uuid

        from sqlalchemy import func, insert, select

        from core.queues import model_queues
        from models import Job, JobStatus, Segment, SegmentStatus, utcnow
        from models.db import session_scope
        from workers.tasks import synthesize

        job_id = uuid.uuid4()
        with session_scope() as session:
            session.add(Job(id=job_id, model=self.engine.info.id, voice=self.voice,
                            response_format="flac", chapters=[{"title": None, "input": "x"}],
                            options={"language": "en", "max_new_tokens": self.args.frames},
                            status=JobStatus.in_progress, started_at=utcnow(),
                            segments_total=n * self.args.waves + 1))  # +1: no assembly
            ids = [uuid.uuid4() for _ in range(n * self.args.waves)]
            session.execute(insert(Segment), [
                {"id": ids[i], "job_id": job_id, "index": i, "text": TEXTS[i % len(TEXTS)]}
                for i in range(len(ids))])
        # The worker runs more threads than n: bound the engine at n requests, as (a) and (b).
        bound = getattr(self.engine, "_slots", None)
        if bound is not None:
            self.engine._slots = threading.BoundedSemaphore(n)
        calls: list[tuple[float, float]] = []  # each engine call's start and end
        real = self.engine.synthesize

        def timed(requests: list[Any]) -> Any:
            begin = time.perf_counter()
            try:
                return real(requests)
            finally:
                calls.append((begin, time.perf_counter()))

        self.engine.synthesize = timed
        start = time.perf_counter()
        queue = model_queues(self.engine.info.id)[1]
        for segment_id in ids:
            synthesize.apply_async((str(segment_id),), queue=queue)
        while True:
            with session_scope() as session:
                done, samples = session.execute(
                    select(func.count(), func.coalesce(func.sum(Segment.samples), 0))
                    .where(Segment.job_id == job_id, Segment.status == SegmentStatus.done)).one()
            if done >= len(ids):
                wall = time.perf_counter() - start
                self.engine.synthesize = real
                if bound is not None:
                    self.engine._slots = bound
                emit(worker_timeline(calls, start, wall, n))
                return wall, int(samples or 0)
            if time.perf_counter() - start > 600:
                raise TimeoutError(f"worker finished {done} of {n} segments")
            time.sleep(0.02)

    def ttfa(self, load: int, reps: int) -> list[float]:
        """Time to the first streamed chunk of realtime requests, with `load` batch requests."""
        from workers.engines import SpeechRequest

        stop = threading.Event()

        def background(i: int) -> None:
            while not stop.is_set():
                self.engine.synthesize([SpeechRequest(
                    text=TEXTS[i % 4], voice=self.voice, max_new_tokens=self.args.frames)])

        loaders = [threading.Thread(target=background, args=(i,), daemon=True)
                   for i in range(load)]
        for t in loaders:
            t.start()
        if load:
            time.sleep(2.0)

        def probe(i: int, out: list[float]) -> None:
            request = SpeechRequest(text=TEXTS[i % 4], voice=self.voice, realtime=True,
                                    max_new_tokens=self.args.frames, request_id=f"ttfa-{i}")
            start = time.perf_counter()
            stream = self.engine.stream(request)
            next(stream)
            out.append(time.perf_counter() - start)
            collections.deque(stream, maxlen=0)  # drain the rest of the stream

        samples: list[float] = []
        gap = self.args.ttfa_gap if load else 0.0
        if not gap:  # one after another, each drained before the next
            for i in range(reps):
                probe(i, samples)
        else:  # one every `gap` s whatever the others do: the probes fall at every phase of
            # the batch's waves, its ends (where whole decodes queue in Code2Wav) included
            probes = []
            for i in range(reps):
                probes.append(threading.Thread(target=probe, args=(i, samples), daemon=True))
                probes[-1].start()
                time.sleep(gap)
            for t in probes:
                t.join()
        stop.set()
        return samples


def main() -> None:
    """Run every path at every concurrency and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--frames", type=int, nargs="+", default=[250],
                        help="output length(s) in frames (0.08 s each): the segment length")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--paths", nargs="+", default=["raw", "adapter", "worker"])
    parser.add_argument("--process-paths", nargs="*", default=[],
                        choices=["adapter", "worker"],
                        help="then run these against the engine in a process of its own")
    parser.add_argument("--stagger-ms", type=float, default=5.0,
                        help="raw_staggered: gap between the first N requests' starts")
    parser.add_argument("--jitter", type=int, default=50,
                        help="raw_jitter: request lengths vary by up to this many frames")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--waves", type=int, default=1,
                        help="requests per slot: >1 measures steady flow, not one lockstep batch")
    parser.add_argument("--ttfa-reps", type=int, default=5,
                        help="first-audio probes under load (alone: at most 5)")
    parser.add_argument("--ttfa-load", type=int, default=32)
    parser.add_argument("--ttfa-gap", type=float, default=0.8,
                        help="seconds between first-audio probes under load, each in its own "
                             "thread (0: one after another, each drained first, as before)")
    parser.add_argument("--deploy-config", default="",
                        help="a deploy YAML; 'default': vLLM-Omni's own; empty: Narrator's")
    parser.add_argument("--whole", action="store_true",
                        help="raw requests carry the whole-answer mark (Narrator's hand-off)")
    parser.add_argument("--label", default="default")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set for the engine and its stage processes (repeatable)")
    parser.add_argument("--start-only", action="store_true",
                        help="start the engine, report how long it took, and exit")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="narrator-gpu-"))
    os.environ |= {"NARRATOR_ENGINE": "vllm-omni", "NARRATOR_MODEL": args.model,
                   "NARRATOR_DATA_DIR": str(data), "NARRATOR_LOG_LEVEL": "WARNING",
                   "NARRATOR_VLLM_MAX_IN_FLIGHT": str(max(args.concurrency)),
                   # The worker path's Celery worker runs in this process, which has held an
                   # engine (torch, vLLM): its resident size is not a worker's, so no recycling
                   # (seen: it recycled at 2,054 MiB and ended the run).
                   "NARRATOR_WORKER_MAX_RSS_MB": "0"}
    if args.deploy_config:
        os.environ["NARRATOR_VLLM_DEPLOY_CONFIG"] = args.deploy_config
    os.environ |= dict(item.split("=", 1) for item in args.env)
    from core.logs import configure

    configure("WARNING", json=True)
    frames_list = list(args.frames)
    args.frames = frames_list[0]
    bench = Bench(args)
    if args.start_only:
        sys.stdout.flush()
        os._exit(0)
    warm = max(args.concurrency)
    start = time.perf_counter()
    bench.adapter(warm, waves=1)  # Triton compiles kernels at the first large batch
    emit({"tag": "warmup", "concurrency": warm, "seconds": round(time.perf_counter() - start, 1)})
    if "worker" in args.paths:
        bench.start_worker()
    rows: dict[tuple[str, int, int], list[float]] = {}
    busy = GpuBusy()

    def measure(paths: list[str], suffix: str = "") -> None:
        for frames in frames_list:
            args.frames = frames
            for n in args.concurrency:
                for _ in range(args.reps):
                    for path in paths:
                        trace.event("bench_row", path=path + suffix)  # splits a trace by row
                        wall, samples = getattr(bench, path)(n)
                        gpu = busy.mean(time.monotonic() - wall, time.monotonic())
                        rate = samples / SR / wall
                        rows.setdefault((path + suffix, n, frames), []).append(rate)
                        emit({"tag": path + suffix, "frames": frames, "concurrency": n,
                              "wall_s": round(wall, 3), "audio_s": round(samples / SR, 2),
                              "audio_s_per_wall_s": round(rate, 2),
                              "samples_per_request": samples // (n * args.waves),
                              "waves": args.waves, "gpu_memory": gpu_memory(), "gpu": gpu})

    measure(args.paths)
    if args.process_paths:
        bench.restart_in_process_of_its_own()
        start = time.perf_counter()
        bench.adapter(warm, waves=1)
        emit({"tag": "warmup_proc", "seconds": round(time.perf_counter() - start, 1)})
        if "worker" in args.process_paths and "worker" not in args.paths:
            bench.start_worker()
        measure(args.process_paths, "_proc")
    paths = args.paths + [p + "_proc" for p in args.process_paths]
    args.frames = frames_list[0]
    ttfa_idle = bench.ttfa(0, min(args.ttfa_reps, 5)) if args.ttfa_reps else []
    ttfa_load = (bench.ttfa(args.ttfa_load, args.ttfa_reps)
                 if args.ttfa_load and args.ttfa_reps else [])
    emit({"tag": "ttfa", "idle_ms": [round(t * 1000, 1) for t in ttfa_idle],
          "under_load_ms": [round(t * 1000, 1) for t in ttfa_load], "load": args.ttfa_load})

    print(f"\n{args.label}: {bench.engine.info.id}, {args.waves} wave(s) per slot; "
          f"audio-s per wall-s, median of {args.reps}")
    header = "| frames | concurrency | " + " | ".join(paths) + " | " + " | ".join(
        f"{p}/raw" for p in paths if p != "raw") + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    result: dict[str, Any] = {"label": args.label, "waves": args.waves,
                              "deploy_config": args.deploy_config, "rows": []}
    for frames in frames_list:
        for n in args.concurrency:
            med = {p: statistics.median(rows[(p, n, frames)]) for p in paths}
            ratios = {p: med[p] / med["raw"] for p in paths if p != "raw" and "raw" in med}
            print(f"| {frames} ({frames * 0.08:.0f} s) | {n} | "
                  + " | ".join(f"{med[p]:.1f}" for p in paths) + " | "
                  + " | ".join(f"{r:.3f}" for r in ratios.values()) + " |")
            result["rows"].append({"frames": frames, "concurrency": n, "median": med,
                                   "ratio_to_raw": ratios})
    if ttfa_idle:
        print(f"TTFA streamed, idle: median {statistics.median(ttfa_idle) * 1000:.0f} ms"
              + (f"; with {args.ttfa_load} batch requests running: median "
                 f"{statistics.median(ttfa_load) * 1000:.0f} ms" if ttfa_load else ""))
    result |= {"ttfa_idle_ms": [round(t * 1000, 1) for t in ttfa_idle],
               "ttfa_load_ms": [round(t * 1000, 1) for t in ttfa_load], "ttfa_load": args.ttfa_load}
    out = Path(os.environ.get("OUT", Path(__file__).parent / "results"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_engine_{args.label}.json").write_text(json.dumps(result, indent=1))
    sys.stdout.flush()
    os._exit(0)  # engine stage processes and threads: do not wait for them


if __name__ == "__main__":
    main()
