"""`narrator`: serve, api, worker, migrate (server side); say, submit, lexicon (client side)."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer

if TYPE_CHECKING:
    from narrator.client import Narrator

cli = typer.Typer(help="Narrator: a self-hosted text-to-speech job platform.",
                  no_args_is_help=True, add_completion=False)


@cli.callback()
def _setup(log_level: Annotated[str | None, typer.Option(
               help="DEBUG, INFO, WARNING or ERROR [default: NARRATOR_LOG_LEVEL, INFO]")] = None,
           log_json: Annotated[bool | None, typer.Option(
               help="JSON lines [default: NARRATOR_LOG_JSON, else when not a terminal]")] = None,
           ) -> None:
    """Configure logging for every command."""
    from core.logs import configure
    from core.settings import LogSettings

    settings = LogSettings()
    configure((log_level or settings.log_level).upper(),
              settings.log_json if log_json is None else log_json)
UrlOpt = Annotated[str, typer.Option("--url", envvar="NARRATOR_URL", help="API base URL")]
KeyOpt = Annotated[str, typer.Option("--api-key", envvar="NARRATOR_API_KEY")]
DEFAULT_URL = "http://127.0.0.1:8000"
ROOT = Path(__file__).resolve().parent.parent


def _upgrade() -> None:
    """Migrate the database, quietly (alembic announces every step at INFO)."""
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)  # before: it logs on import too
    from migrations import upgrade

    upgrade()


def _data_dir() -> None:
    """Create DATA_DIR for the owner only before anything is written under it (server
    commands; client commands write nothing there)."""
    from models.db import private_data_dir
    from models.settings import get_settings

    private_data_dir(get_settings().data_dir)


@cli.command()
def migrate() -> None:
    """Create or upgrade the database schema."""
    _data_dir()
    from migrations import upgrade

    upgrade()
    typer.echo("database is at the latest migration")


keys = typer.Typer(help="API keys kept in the database (hashed); the API closes once one exists.",
                   no_args_is_help=True)
cli.add_typer(keys, name="keys")


@keys.command("create")
def keys_create(name: Annotated[str, typer.Option(help="who or what the key is for")]) -> None:
    """Create a key and print it once: only its SHA-256 is stored."""
    from models import ApiKey
    from models.api_key import digest, new_key
    from models.db import session_scope

    key = new_key()
    with session_scope() as session:
        row = ApiKey(name=name, hint=key[:10], digest=digest(key))
        session.add(row)
        session.flush()
        key_id = row.id
    typer.echo(f"{key_id}  {name}\n{key}\n(store it now: it cannot be shown again)")


@keys.command("list")
def keys_list() -> None:
    """List keys: id, name, first characters, created, revoked."""
    from sqlalchemy import select

    from models import ApiKey
    from models.db import session_scope

    with session_scope() as session:
        for row in session.scalars(select(ApiKey).order_by(ApiKey.created_at)):
            revoked = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
            typer.echo(f"{row.id}  {row.name}  {row.hint}...  "
                       f"created {row.created_at:%Y-%m-%d %H:%M}  {revoked}")


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the id from `narrator keys list`")]
                ) -> None:
    """Revoke a key (the API refuses it within seconds); its jobs stay in place."""
    import uuid

    from sqlalchemy import update

    from models import ApiKey, utcnow
    from models.db import session_scope

    try:
        wanted = uuid.UUID(key_id)
    except ValueError:
        raise typer.BadParameter(f"not a key id: {key_id}") from None
    with session_scope() as session:
        found = session.execute(update(ApiKey).where(ApiKey.id == wanted,
                                                     ApiKey.revoked_at.is_(None))
                                .values(revoked_at=utcnow()).returning(ApiKey.id)).first()
    if found is None:
        typer.echo(f"no active key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


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
    _data_dir()
    import socket

    import uvicorn

    if workers > 1:
        _share_metrics()  # each process writes its own; /metrics adds them up
        _supervise([sys.executable, "-P", "-m", "narrator", "api", "--host", host,
                    "--port", str(port), "--reuse-port"], workers)
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


def _supervise(argv: list[str], count: int, *, name: str = "api",
               envs: list[dict[str, str]] | None = None, wait: float = 30.0,
               ready_file: str = "", pass_sighup: bool = False) -> None:
    """Run `count` copies of `argv` until SIGTERM or SIGINT; start again one that exits.

    SIGTERM and SIGINT go to every copy as SIGTERM (uvicorn's and Celery's graceful
    shutdowns), then each gets `wait` seconds. `envs`: each copy's environment. With
    `pass_sighup`, SIGHUP goes to every copy (a worker recycles itself on it). `ready_file`
    exists while every copy's own `ready_file.N` does.

    uvicorn's own --workers shares one listening socket between its processes, and the
    kernel then hands keep-alive connections to whichever process accepts first: under
    bench.submit one process of two took every connection in one run of two (356 jobs/s, as
    one process), while each process on its own SO_REUSEPORT socket took half every time
    (586-618 against one process's 391-462; bench/results/submit_reuseport_2026-11-25_s14.txt).
    """
    import time

    import structlog

    log = structlog.get_logger()

    def launch(n: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env=envs[n] if envs else None)

    children = [launch(n) for n in range(count)]
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            child.send_signal(signal.SIGTERM)

    def recycle(_signum: int, _frame: object) -> None:
        for child in children:
            child.send_signal(signal.SIGHUP)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if pass_sighup:
        signal.signal(signal.SIGHUP, recycle)
    exits: list[float] = []  # when processes exited: a crash loop ends the supervisor
    while not stopping:
        for n, child in enumerate(children):
            if child.poll() is not None and not stopping:
                log.warning(f"{name}.process_exited", pid=child.pid, code=child.returncode)
                exits = [t for t in exits if t > time.monotonic() - 60] + [time.monotonic()]
                if len(exits) > 2 * count:  # it cannot start (the port is taken, ...)
                    stop(signal.SIGTERM, None)
                    break
                time.sleep(1)
                children[n] = launch(n)
        if ready_file and all(Path(f"{ready_file}.{n}").exists() for n in range(count)):
            Path(ready_file).touch()
        elif ready_file:
            Path(ready_file).unlink(missing_ok=True)
        time.sleep(0.5)
    if ready_file:
        Path(ready_file).unlink(missing_ok=True)
    for child in children:
        try:
            child.wait(wait)
        except subprocess.TimeoutExpired:
            child.kill()
    if len(exits) > 2 * count:
        raise SystemExit(f"{name} processes exited {len(exits)} times in a minute")


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
    _data_dir()
    import structlog

    structlog.get_logger().info("worker.starting", pid=os.getpid())
    from core.catalog import catalog
    from core.queues import BATCH, REALTIME, split_queues, worker_queues
    from workers.app import celery_app
    from workers.book.parts import cores
    from workers.settings import get_settings

    settings = get_settings()
    # GPU workers leave assembly to CPU workers while any run (workers.tasks.assembly_queue).
    queues = queues or ",".join(worker_queues([m.id for m in catalog(settings)],
                                              assembles=settings.engine == "piper"))
    os.environ["NARRATOR_WORKER_QUEUES"] = queues  # the worker's settings read it
    get_settings.cache_clear()
    # Realtime queues go to the worker's realtime lane (workers.runtime.lane), the rest to
    # Celery's pool, so batch work never holds the threads sync speech needs.
    pooled, _ = split_queues(queues.split(","))
    # A worker with no model queue (--queues assembly) runs no engine: its tasks are CPU work
    # (MP3 fragments, assemblies) on a thread per core, whatever NARRATOR_ENGINE says.
    synthesizes = any(q.startswith((f"{REALTIME}.", f"{BATCH}.")) for q in queues.split(","))
    # One process's threads share one GIL: on two H100s one assembly worker's 32 threads
    # encoded about 25 MP3 fragments a second after a wave of segments, 4.7 cores busy on
    # average over the job, each task 1.1-1.4 s against 0.3 s alone; each fragment held the
    # GIL 7-15 ms of its 100-150 ms of CPU here (bench.fragments; README, One host, several
    # GPUs). More cores, more processes; an engine stays in one.
    processes = processes or (
        1 if synthesizes else max(1, cores() // settings.assembly_cores_per_process))
    if processes > 1:
        _supervise_workers(queues, processes, pool, concurrency or max(1, cores() // processes),
                           loglevel, banner)
        return
    pool = pool or "threads"
    argv = [*([] if banner else ["--quiet"]), "worker", "-Q", ",".join(pooled), "--pool", pool,
            "-l", loglevel,
            "--without-mingle", "--without-gossip", "--without-heartbeat"]
    if not concurrency and pool == "threads":
        # On the GPU a thread per engine slot: a thread beyond the slots reserves a segment
        # that waits for one, which another worker could be running. With 1.5 threads a slot,
        # two workers split a 256-segment job 134 / 122 on two H100s, and the one job ran
        # 1.52x one worker's rate; over the engine double, 1.37x, and 1.79x with a thread a
        # slot, for 1-2.5 % of one worker's rate (README, several GPUs). On Piper (and with no
        # engine) a thread per core: each segment runs on one core (workers/engines/piper.py).
        gpu = synthesizes and settings.engine == "vllm-omni"
        concurrency = settings.worker_threads or (
            settings.vllm_max_in_flight if gpu else cores())
    if concurrency:
        argv += ["-c", str(concurrency)]
    celery_app.worker_main(argv)


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
    _supervise(argv, count, name="worker", envs=envs, ready_file=settings.ready_file,
               wait=settings.worker_shutdown_grace_seconds + 35, pass_sighup=True)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@cli.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run everything in one command: migrate, a worker and the API (embedded defaults)."""
    _data_dir()
    _share_metrics()  # the API's /metrics shows the worker's too
    _upgrade()
    # -P: keep the working directory off sys.path in the child too. No Celery banner and no
    # Celery chatter: the worker's own lines (job and segment events) and the API's requests.
    child = subprocess.Popen([sys.executable, "-P", "-m", "narrator", "worker", "--no-banner",
                              "--loglevel", "WARNING"],
                             env=os.environ.copy())
    typer.echo(f"Narrator on http://{host}:{port} (worker pid {child.pid}); Ctrl-C stops it")
    # uvicorn shuts down on SIGTERM (docker stop, systemd, kill) and then raises the signal
    # again under the handler it found: SIGTERM's default would end this process before the
    # `finally` below, leaving the worker running. Exit through the `finally` instead.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        api(host=host, port=port, workers=1)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


@contextmanager
def _api(url: str, key: str) -> Iterator["Narrator"]:
    """The API's client (narrator.client); its errors are one line and exit 1, not a trace."""
    from narrator.client import JobFailed, Narrator, NarratorError

    try:
        with Narrator(url, key or None, retries=2) as client:
            yield client
    except httpx.TransportError as exc:
        typer.echo(f"error: no Narrator API answers at {url} ({type(exc).__name__}); start "
                   "one with `narrator serve`, or point --url (NARRATOR_URL) at yours", err=True)
        raise typer.Exit(1) from None
    except NarratorError as exc:
        typer.echo(f"error {exc.status}: {exc.message}", err=True)
        raise typer.Exit(1) from None
    except JobFailed as exc:
        typer.echo(f"job {exc.job['status']}: {exc.job['error']}", err=True)
        raise typer.Exit(1) from None


LexiconOpt = Annotated[list[str] | None, typer.Option(
    "--lexicon", help="a pronunciation lexicon's name or id (repeat for more; first wins)")]


@cli.command()
def lexicon(file: Annotated[Path, typer.Argument(help="JSON entries, or lines 'text<TAB>alias' "
                                                 "('text<TAB>/ipa/' for phonemes)")],
            name: Annotated[str, typer.Option(help="the lexicon's name")],
            url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Create the lexicon NAME from FILE, or replace the one of that name."""
    import json

    raw = file.read_text(encoding="utf-8")
    if file.suffix == ".json":
        loaded = json.loads(raw)
        entries = loaded["entries"] if isinstance(loaded, dict) else loaded
    else:
        entries = [_entry(*line.split("\t", 1)) for line in raw.splitlines()
                   if line.strip() and not line.startswith("#") and "\t" in line]
    with _api(url, api_key) as client:
        made = client.save_lexicon(name, entries)
    typer.echo(f"{made['id']}  {made['name']}: {made['entry_count']} entries")


def _entry(text: str, say: str) -> dict[str, str]:
    say = say.strip()
    if len(say) > 2 and say.startswith("/") and say.endswith("/"):
        return {"text": text.strip(), "ipa": say[1:-1]}
    return {"text": text.strip(), "alias": say}


@cli.command()
def say(text: str, output: Annotated[Path, typer.Option("-o", "--output")],
        voice: str = "", model: str = "", speed: float = 1.0, lexicon: LexiconOpt = None,
        url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Speak TEXT into FILE; the format comes from the file's extension."""
    fmt = {"ogg": "opus"}.get(output.suffix.lstrip("."), output.suffix.lstrip(".") or "mp3")
    with _api(url, api_key) as client:
        audio = client.speak(text, voice=voice or None, model=model or None,
                             response_format=fmt, speed=speed,
                             **({"lexicons": lexicon} if lexicon else {}))
    output.write_bytes(audio)
    typer.echo(f"{output}: {audio.duration} s")


@cli.command()
def submit(file: Annotated[Path, typer.Argument(help="plain text, Markdown (.md: headings "
                                                "become chapters) or an EPUB")],
           wait: bool = False,
           output: Annotated[Path | None, typer.Option("-o", "--output")] = None,
           fmt: Annotated[str, typer.Option("--format")] = "mp3", voice: str = "",
           lexicon: LexiconOpt = None,
           cover: Annotated[Path | None, typer.Option(help="a JPEG or PNG for the files")] = None,
           title: Annotated[str, typer.Option(help="the book's title (tags)")] = "",
           author: Annotated[str, typer.Option(help="the book's author (tags)")] = "",
           mastering: Annotated[str, typer.Option(help="'acx': ACX-ready MP3 chapters")] = "",
           cast: Annotated[list[str] | None, typer.Option(
               help="NAME=VOICE: [voice:NAME] marks speak in VOICE (repeat for more)")] = None,
           url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Submit FILE as a job; with --wait, follow it and download the audio."""
    fields: dict[str, Any] = {"response_format": fmt}
    fields |= {k: v for k, v in (("voice", voice), ("lexicons", lexicon),
                                 ("mastering", mastering)) if v}
    pairs = [entry.partition("=") for entry in cast or []]
    if any(not name.strip() or not sep or not voice_id.strip() for name, sep, voice_id in pairs):
        raise typer.BadParameter("give --cast as NAME=VOICE", param_hint="--cast")
    fields |= {"cast": {n.strip(): v.strip() for n, _, v in pairs}} if pairs else {}
    book = {k: v for k, v in (("title", title), ("author", author)) if v}
    fields |= {"book": book} if book else {}
    with _api(url, api_key) as client:
        job = client.submit(file, cover=cover, **fields)
        typer.echo(job["id"])
        if not wait and output is None:
            return
        job = _follow(client, job)
        if output is not None:
            client.download(job, output)
            typer.echo(f"{output}: {job['result']['duration_seconds']:.1f} s")


@cli.command()
def retry(job_id: str, wait: bool = False, url: UrlOpt = DEFAULT_URL,
          api_key: KeyOpt = "") -> None:
    """Run a failed job again: only what did not finish; with --wait, follow it."""
    with _api(url, api_key) as client:
        job = client.retry(job_id)
        segments = job["segments"]
        typer.echo(f"{job['id']}: {job['status']}, {segments['done']}/{segments['total']} "
                   "segments kept")
        if wait:
            _follow(client, job)


def _follow(client: "Narrator", job: dict[str, Any]) -> dict[str, Any]:
    """Wait for a job, drawing a progress bar with the server's ETA on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    def eta(seconds: float | None) -> str:
        if seconds is None:
            return "eta -"
        minutes, secs = divmod(int(seconds), 60)
        return f"eta {minutes // 60}:{minutes % 60:02d}:{secs:02d}"

    columns = (TextColumn("{task.description:<11}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[segments]}"), TextColumn("{task.fields[eta]}"))
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(job["status"], total=100, segments="", eta=eta(None))

        def show(state: dict[str, Any]) -> None:
            segments = state.get("segments") or {}
            bar.update(task, completed=state["progress"], description=state["status"],
                       segments=f"{segments.get('done', 0)}/{segments.get('total', 0)} segments",
                       eta=eta(state.get("eta_seconds")))

        return client.wait(job, progress=show)


def main() -> None:
    """Entry point of the console script."""
    cli()
