"""Several copies of one process run as one: `narrator api --workers N` and a worker of
several processes.

uvicorn's own --workers shares one listening socket between its processes, and the kernel
then hands keep-alive connections to whichever process accepts first: under bench.submit one
process of two took every connection in one run of two (356 jobs/s, as one process), while
each process on its own SO_REUSEPORT socket took half every time (586-618 against one
process's 391-462; bench/results/submit_reuseport_2026-11-25.txt). So the API's copies
are supervised here, each binding the port itself, and so are a worker's processes.
"""

import signal
import subprocess
import time
from pathlib import Path

import structlog

log = structlog.get_logger()


class Copies:
    """`count` copies of `argv`, each started again when it exits, until told to stop.

    SIGTERM and SIGINT go to every copy as SIGTERM (uvicorn's and Celery's graceful
    shutdowns), then each gets `wait` seconds. `envs`: each copy's environment. With
    `pass_sighup`, SIGHUP goes to every copy (a worker recycles itself on it). `ready_file`
    exists while every copy's own `ready_file.N` does. More than two exits a copy in a
    minute (the port is taken, the database refuses) stop them all.
    """

    def __init__(self, argv: list[str], count: int, *, name: str = "api",
                 envs: list[dict[str, str]] | None = None, wait: float = 30.0,
                 ready_file: str = "", pass_sighup: bool = False) -> None:
        self.argv, self.count, self.name, self.envs = argv, count, name, envs
        self.wait, self.ready_file, self.pass_sighup = wait, ready_file, pass_sighup
        self.children: list[subprocess.Popen[bytes]] = []
        self.exits: list[float] = []  # when copies exited, over the last minute
        self.stopping = False

    def run(self) -> None:
        """Start the copies, keep them running until a signal stops them, then end them."""
        self.children = [self._launch(n) for n in range(self.count)]
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        if self.pass_sighup:
            signal.signal(signal.SIGHUP, self._recycle)
        while not self.stopping:
            self._restart_exited()
            self._mark_ready()
            time.sleep(0.5)
        self._end()

    def _launch(self, n: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, env=self.envs[n] if self.envs else None)

    def _stop(self, _signum: int, _frame: object) -> None:
        self.stopping = True
        for child in self.children:
            child.send_signal(signal.SIGTERM)

    def _recycle(self, _signum: int, _frame: object) -> None:
        for child in self.children:
            child.send_signal(signal.SIGHUP)

    def _crash_loop(self) -> bool:
        return len(self.exits) > 2 * self.count

    def _restart_exited(self) -> None:
        for n, child in enumerate(self.children):
            if child.poll() is None or self.stopping:
                continue
            log.warning(f"{self.name}.process_exited", pid=child.pid, code=child.returncode)
            now = time.monotonic()
            self.exits = [t for t in self.exits if t > now - 60] + [now]
            if self._crash_loop():
                self._stop(signal.SIGTERM, None)
                return
            time.sleep(1)
            self.children[n] = self._launch(n)

    def _mark_ready(self) -> None:
        if not self.ready_file:
            return
        if all(Path(f"{self.ready_file}.{n}").exists() for n in range(self.count)):
            Path(self.ready_file).touch()
        else:
            Path(self.ready_file).unlink(missing_ok=True)

    def _end(self) -> None:
        if self.ready_file:
            Path(self.ready_file).unlink(missing_ok=True)
        for child in self.children:
            try:
                child.wait(self.wait)
            except subprocess.TimeoutExpired:
                child.kill()
        if self._crash_loop():
            raise SystemExit(f"{self.name} processes exited {len(self.exits)} times in a minute")
