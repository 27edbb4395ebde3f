"""Shared helpers for benchmarks: a served platform, timing, tables and results."""

import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    """Return a free TCP port on loopback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(extra_env: dict[str, str] | None = None,
           started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> Iterator[str]:
    """Run `narrator serve` in a fresh data folder; yield its URL. `started` is given the
    serve process as soon as it starts (a bench that samples its processes)."""
    with tempfile.TemporaryDirectory(prefix="narrator-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")}
        env |= {"NARRATOR_DATA_DIR": tmp, "NARRATOR_LOG_LEVEL": "WARNING"} | (extra_env or {})
        port = free_port()
        log = open(Path(tmp) / "serve.log", "wb")  # noqa: SIM115
        process = subprocess.Popen([sys.executable, "-P", "-m", "narrator", "serve", "--port",
                                    str(port)], env=env, stdout=log, stderr=log,
                                   start_new_session=True)
        if started is not None:
            started(process)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz").status_code == 200:
                        break
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError((Path(tmp) / "serve.log").read_text()[-2000:])
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            process.wait(30)
            log.close()


PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def rss_mib(pid: int) -> float:
    """Return the resident memory of a process (Linux /proc), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def profiler(name: str) -> tuple[str, ...]:
    """The command prefix that runs a process under py-spy, writing results/<name>.profile.txt
    (collapsed stacks: one line per stack, then its sample count)."""
    return (str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw",
            "--nonblocking", "--rate", "400", "-o", str(RESULTS / f"{name}.profile.txt"), "--")


def cpu_seconds(pids: list[int]) -> float:
    """Return the CPU time (user + system) the processes have used so far."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@dataclass
class Platform:
    """`narrator api` (and optionally `narrator worker`) on Postgres and Redis."""

    url: str
    database: str
    api: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes] | None
    folder: Path
    more_apis: list[subprocess.Popen[bytes]] = field(default_factory=list)  # --reuse-port


@contextmanager
def platform_on_services(database_url: str = PG_URL, redis_url: str = "redis://127.0.0.1:6379/5",
                         worker: bool = True, api_args: tuple[str, ...] = (),
                         extra_env: dict[str, str] | None = None,
                         api_wrapper: tuple[str, ...] = (),
                         apis: int = 1) -> Iterator[Platform]:
    """Run the API (and a worker) against a fresh database of their own and an empty Redis.

    Yields once /readyz answers (and, with a worker, once it is ready); the database is
    dropped afterwards. `api_wrapper` goes before the API's command (a profiler). `apis`
    starts that many API processes on the port (with `--reuse-port` in `api_args`).
    """
    import redis
    from sqlalchemy import text

    from migrations import upgrade
    from models.db import sql_engine_for

    name = f"narrator_bench_{uuid.uuid4().hex[:8]}"
    admin = sql_engine_for(database_url,
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    database = database_url.rsplit("/", 1)[0] + f"/{name}"
    upgrade(database)
    redis.Redis.from_url(redis_url).flushdb()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    folder = Path(tempfile.mkdtemp(prefix="narrator-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
        "NARRATOR_DATA_DIR": str(folder), "NARRATOR_DATABASE_URL": database,
        "NARRATOR_BROKER_URL": redis_url, "NARRATOR_LOG_LEVEL": "WARNING",
        "NARRATOR_LOG_JSON": "1", "NARRATOR_PUBLIC_API_URL": url} | (extra_env or {})
    command = [sys.executable, "-P", "-m", "narrator"]
    logs = [open(folder / f"{n}.log", "wb") for n in ("api", "worker")]  # noqa: SIM115
    api = subprocess.Popen([*api_wrapper, *command, "api", "--port", str(port), *api_args],
                           env=env,
                           stdout=logs[0], stderr=logs[0], start_new_session=True)
    more = [subprocess.Popen([*command, "api", "--port", str(port), *api_args], env=env,
                             stdout=logs[0], stderr=logs[0], start_new_session=True)
            for _ in range(apis - 1)]
    work = subprocess.Popen([*command, "worker", "--loglevel", "WARNING"], env=env,
                            stdout=logs[1], stderr=logs[1], start_new_session=True) \
        if worker else None
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError):  # not up yet
                ready = httpx.get(f"{url}/readyz").json()
                if ready.get("status") == "ok" and (
                        work is None or ready.get("workers", {}).get("ready")):
                    break
            if time.monotonic() > deadline or api.poll() is not None:
                raise RuntimeError((folder / "api.log").read_text()[-2000:])
            time.sleep(0.3)
        yield Platform(url, database, api, work, folder, more)
    finally:
        for process in (api, *more, work):
            if process is not None:
                process.send_signal(signal.SIGINT if process is api and api_wrapper
                                    else signal.SIGTERM)  # py-spy writes its profile on ^C
                process.wait(60)
        for log in logs:
            log.close()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def load(url: str, method: str, paths: list[str], concurrency: int, requests: int,
         duration: float, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> dict[str, Any]:
    """Run bench.loadgen in its own process and return its result."""
    spec = {"url": url, "method": method, "paths": paths, "concurrency": concurrency,
            "requests": requests, "duration": duration, "body": body.decode(),
            "headers": headers or {}}
    done = subprocess.run([sys.executable, "-m", "bench.loadgen"],  # from the checkout:
                          cwd=RESULTS.parents[1],  # bench/ is not an installed package
                          input=json.dumps(spec).encode(), capture_output=True, check=True,
                          timeout=duration + 120)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def summary(samples: list[float]) -> dict[str, float]:
    """Return median, p90, min and max of samples (seconds)."""
    ordered = sorted(samples)
    return {"median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "min": ordered[0], "max": ordered[-1], "n": len(ordered)}


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Render a Markdown table."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def save(name: str, data: dict[str, Any]) -> Path:
    """Write a result as JSON under bench/results/, with the machine it ran on."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"bench": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()}} | data
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


class GpuBusy:
    """Samples nvidia-smi's utilisation.gpu and memory.used, and the load average, each 0.5 s.

    On a host of several GPUs: the mean utilisation over all of them and the peak memory of
    any one.
    """

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.load: list[tuple[float, float]] = []  # 1-minute load average: CPU contention
        self._stop = threading.Event()
        self.available = shutil.which("nvidia-smi") is not None
        if self.available:
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
                lines = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                        "--format=csv,noheader,nounits"], capture_output=True,
                                       text=True, timeout=5).stdout.splitlines()
                gpus = [[float(v) for v in line.split(",")] for line in lines if line.strip()]
                # Several GPUs: the mean utilisation over them, the peak memory of any one.
                self.samples.append((time.monotonic(), statistics.mean(b for b, _ in gpus),
                                     max(m for _, m in gpus)))
                self.load.append((time.monotonic(), os.getloadavg()[0]))

    def mean(self, start: float, end: float) -> str:
        """Return the mean utilisation and the peak memory between two monotonic times."""
        window = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not window:
            return "n/a"
        load = [v for t, v in self.load if start <= t <= end]
        return (f"{statistics.mean(u for u, _ in window):.0f} %, "
                f"peak {max(m for _, m in window) / 1024:.1f} GiB, load {max(load):.0f}")

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()


def thread_cpu() -> dict[tuple[int, int], tuple[str, str, float]]:
    """Return every thread on this host: (pid, tid) -> (process name, thread name, CPU s).

    Read from /proc (Linux); two snapshots' difference says which threads a phase kept
    busy: a thread near one core is a GIL or a loop that cannot go faster.
    """
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[tuple[int, int], tuple[str, str, float]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            name = (proc / "comm").read_text().strip()
            if name.startswith("python"):  # say which: `narrator worker`, an engine child
                argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
                name = " ".join(a for a in argv[1:] if a and a not in ("-P", "-m", "-c"))[:40]
            for task in (proc / "task").iterdir():
                stat = (task / "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                found[(int(proc.name), int(task.name))] = (
                    name, (task / "comm").read_text().strip(),
                    (int(fields[11]) + int(fields[12])) / tick)
    return found


def busiest_threads(before: dict[tuple[int, int], tuple[str, str, float]],
                    after: dict[tuple[int, int], tuple[str, str, float]], seconds: float,
                    top: int = 12) -> dict[str, Any]:
    """Cores used between two thread_cpu() snapshots: per process, and the busiest threads."""
    used = {key: (name, thread, cpu - before.get(key, (name, thread, 0.0))[2])
            for key, (name, thread, cpu) in after.items()}
    processes: dict[str, float] = {}
    for (pid, _), (name, _, cpu) in used.items():
        processes[f"{name}[{pid}]"] = processes.get(f"{name}[{pid}]", 0.0) + cpu
    threads = sorted(((cpu, f"{name}[{pid}]/{thread}[{tid}]") for (pid, tid), (name, thread, cpu)
                      in used.items()), reverse=True)[:top]
    return {"seconds": round(seconds, 1),
            "host_cores": round(sum(processes.values()) / seconds, 2),
            "processes": {k: round(v / seconds, 2) for k, v in sorted(
                processes.items(), key=lambda kv: -kv[1])[:top]},
            "threads": {label: round(cpu / seconds, 2) for cpu, label in threads}}
