"""Server commands: the API, a worker, and `serve` (both, embedded) as processes."""

import os
import signal
import subprocess
import sys
from typing import Annotated, Any

import typer

from narrator.app import ROOT, cli, private_data, upgrade_database
from narrator.supervisor import Copies


def _share_metrics() -> None:
    """Give this process and its children one fresh folder for Prometheus values."""
    import shutil

    from workers.settings import get_settings

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    folder = get_settings().data_dir.resolve() / "metrics"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


@cli.command()
def api(host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
        reuse_port: Annotated[bool, typer.Option(
            help="bind with SO_REUSEPORT (Linux), so that several `narrator api` processes "
                 "share the port and the kernel spreads new connections between them "
                 "(what --workers does)")] = False,
        ) -> None:
    """Run the HTTP API (--workers N: N processes, each with its own socket on the port)."""
    private_data()
    import socket

    import uvicorn

    if workers > 1:
        _share_metrics()  # each process writes its own; /metrics adds them up
        Copies([sys.executable, "-P", "-m", "narrator", "api", "--host", host,
                "--port", str(port), "--reuse-port"], workers).run()
        return
    _settle_gc()
    from api.http_protocol import HeadDeadline

    options: dict[str, Any] = {"factory": True, "log_level": "warning", "access_log": False,
                               "http": HeadDeadline}
    if not reuse_port:
        # app_dir: the installed packages, not the working directory (a ./models folder
        # there must not shadow ours).
        uvicorn.run("api.app:create_app", host=host, port=port, app_dir=str(ROOT), **options)
        return
    sys.path.insert(0, str(ROOT))
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((host, port))
    uvicorn.Server(uvicorn.Config("api.app:create_app", **options)).run(sockets=[listener])


def _settle_gc() -> None:
    """Freeze what the API imports out of the collector's reach, and collect less often.

    A submit makes a few hundred container objects, so Python's collector ran every few
    requests, and each full collection walked every object the process holds (FastAPI's,
    SQLAlchemy's, Celery's modules): 125-180 ms with the event loop stopped, three or four
    times in 8 s at 16 clients, and POST /v1/audio/jobs's p99 was those pauses (200-241 ms).
    Frozen, a full collection took 4-10 ms (p99 109-152 ms); with the first generation's
    threshold at 50,000 as well, 90-102 ms and 15-20 % more jobs/s (one run
    alternating the settings). On another machine, both ways twice: submit p99 at
    16 clients 38-41 ms against 105-123, at 64 clients 911-915 jobs/s against 646-745;
    bench.batch 10,709 jobs/s against 9,445, GET p99 at 64 clients 101 ms against 193 (154
    against 249 beside a batch).
    """
    import gc

    import api.app  # noqa: F401  (imported now, so that its modules are frozen)

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)


@cli.command()
def worker(
    queues: Annotated[str, typer.Option(
        help="comma-separated queues (default: realtime.<model>, batch.<model>, batch, and "
             "assembly on CPU engines); "
             "realtime.* ones get the worker's realtime lane")] = "",
    pool: Annotated[str, typer.Option(
        help="default: threads (on Piper one per core, on vLLM-Omni VLLM_MAX_IN_FLIGHT)"
             )] = "",
    concurrency: int = 0,
    processes: Annotated[int, typer.Option(
        help="worker processes, each a Celery worker of its own with a share of the cores "
             "(0: one per ASSEMBLY_CORES_PER_PROCESS cores on a worker that runs no engine, "
             "else 1)")] = 0,
    loglevel: str = "INFO",
    banner: Annotated[bool, typer.Option(help="print Celery's start-up banner")] = True,
) -> None:
    """Run a Celery worker on the configured engine."""
    private_data()
    import structlog

    structlog.get_logger().info("worker.starting", pid=os.getpid())
    _quiet_root_warning()
    from core.catalog import CPU_ENGINES, catalog
    from core.queues import BATCH, REALTIME, split_queues, worker_queues
    from workers.app import celery_app
    from workers.settings import cores, get_settings

    settings = get_settings()
    # GPU workers leave assembly to CPU workers while any run (workers.tasks.assembly_queue).
    queues = queues or ",".join(worker_queues([m.id for m in catalog(settings)],
                                              assembles=settings.engine in CPU_ENGINES))
    os.environ["NARRATOR_WORKER_QUEUES"] = queues  # the worker's settings read it
    get_settings.cache_clear()
    # Realtime queues go to the worker's realtime lane (workers.runtime.lane), the rest to
    # Celery's pool, so batch work never holds the threads sync speech needs.
    pooled, _ = split_queues(queues.split(","))
    # A worker with no model queue (--queues assembly) runs no engine: its tasks are CPU work
    # (MP3 fragments, assemblies) on a thread per core, whatever NARRATOR_ENGINE says.
    synthesizes = any(q.startswith((f"{REALTIME}.", f"{BATCH}.")) for q in queues.split(","))
    processes = processes or _processes(synthesizes)
    if processes > 1:
        _supervise_workers(queues, processes, pool, concurrency or max(1, cores() // processes),
                           loglevel, banner)
        return
    pool = pool or "threads"
    if synthesizes and pool in ("threads", "solo"):  # one process: the engine's is this one's
        from workers.runtime.engine import start_early

        start_early()  # its import and stages overlap Celery's start
    argv = [*([] if banner else ["--quiet"]), "worker", "-Q", ",".join(pooled), "--pool", pool,
            "-l", loglevel,
            "--without-mingle", "--without-gossip", "--without-heartbeat"]
    if not concurrency and pool == "threads":
        concurrency = _threads(synthesizes and settings.engine == "vllm-omni")
    if concurrency:
        argv += ["-c", str(concurrency)]
    celery_app.worker_main(argv)


def _quiet_root_warning() -> None:
    """Celery warns a worker run as root against unpickling messages; Narrator's workers
    accept JSON only (core/broker.py) and its images run as the `narrator` user, so the
    warning only alarmed a root shell running `narrator serve`."""
    import warnings

    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", category=SecurityWarning)


def _processes(synthesizes: bool) -> int:
    """A worker's default process count (--processes 0).

    One process's threads share one GIL: on two H100s one assembly worker's 32 threads
    encoded about 25 MP3 fragments a second after a wave of segments, 4.7 cores busy on
    average over the job, each task 1.1-1.4 s against 0.3 s alone; each fragment held the GIL
    7-15 ms of its 100-150 ms of CPU (bench.fragments; docs/deployment.md, One host, several
    GPUs). More cores, more processes; an engine stays in one.
    """
    from workers.settings import cores, get_settings

    return 1 if synthesizes else max(1, cores() // get_settings().assembly_cores_per_process)


def _threads(gpu: bool) -> int:
    """A worker's default thread count (workers/settings.py pool_threads)."""
    from workers.settings import get_settings

    return get_settings().pool_threads(gpu)


def _supervise_workers(queues: str, count: int, pool: str, threads: int, loglevel: str,
                       banner: bool) -> None:
    """Run `count` `narrator worker` processes on `queues`, `threads` each, as one worker.

    Each is an ordinary worker: its own registry record, heartbeat and recycle. The first
    serves /metrics (METRICS_PORT) for all of them (Prometheus' multiprocess folder), and
    READY_FILE exists while each one's READY_FILE.N does.
    """
    from workers.settings import get_settings

    settings = get_settings()
    if settings.metrics_port:
        _share_metrics()
    argv = [sys.executable, "-P", "-m", "narrator", "worker", "--queues", queues,
            "--processes", "1", "--concurrency", str(threads), "--loglevel", loglevel,
            *(["--pool", pool] if pool else []), *([] if banner else ["--no-banner"])]
    envs = [os.environ | ({"NARRATOR_READY_FILE": f"{settings.ready_file}.{n}"}
                          if settings.ready_file else {})
            | ({"NARRATOR_METRICS_PORT": "0"} if n else {}) for n in range(count)]
    Copies(argv, count, name="worker", envs=envs, ready_file=settings.ready_file,
           wait=settings.worker_shutdown_grace_seconds + 35, pass_sighup=True).run()


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@cli.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run everything in one command: migrate, a worker and the API (embedded defaults)."""
    private_data()
    _share_metrics()  # the API's /metrics shows the worker's too
    upgrade_database()
    children = [subprocess.Popen(command, env=env) for command, env in _serve_workers()]
    pids = ", ".join(str(c.pid) for c in children)
    typer.echo(f"Narrator on http://{host}:{port} (worker pids {pids}); Ctrl-C stops it")
    # uvicorn shuts down on SIGTERM (docker stop, systemd, kill) and then raises the signal
    # again under the handler it found: SIGTERM's default would end this process before the
    # `finally` below, leaving the worker running. Exit through the `finally` instead.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        api(host=host, port=port, workers=1)
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def _serve_workers() -> list[tuple[list[str], dict[str, str]]]:
    """The workers `narrator serve` runs: the configured engine's, and on Piper a Kokoro
    worker beside it where Kokoro is installed (SERVE_KOKORO), taking only its model's
    queues (plans and assemblies stay with the first)."""
    from core.catalog import kokoro_installed
    from core.queues import model_queues
    from workers.settings import get_settings

    # -P: keep the working directory off sys.path in the child too. No Celery banner and no
    # Celery chatter: the worker's own lines (job and segment events) and the API's requests.
    command = [sys.executable, "-P", "-m", "narrator", "worker", "--no-banner",
               "--loglevel", "WARNING"]
    workers = [(command, os.environ.copy())]
    settings = get_settings()
    if settings.engine == "piper" and settings.serve_kokoro and kokoro_installed():
        workers.append(([*command, "--queues", ",".join(model_queues("kokoro"))],
                        os.environ | {"NARRATOR_ENGINE": "kokoro", "NARRATOR_MODEL": ""}))
    return workers
