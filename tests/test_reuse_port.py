"""`narrator api --reuse-port`: several API processes on one port (SO_REUSEPORT), each
answering; the port stays served when one of them stops."""

import contextlib
import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.support import free_port, narrator


def _healthy(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def _env(tmp_path: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
        "NARRATOR_DATA_DIR": str(tmp_path)}


def _apis(tmp_path: Path, port: int, *args: str, count: int = 1) -> list[subprocess.Popen[bytes]]:
    """Start `count` `narrator api --port PORT ARGS` processes, logging to api.log."""
    with (tmp_path / "api.log").open("ab") as out:
        return [subprocess.Popen(narrator("api", "--port", str(port), *args),
                                 env=_env(tmp_path), stdout=out, stderr=out)
                for _ in range(count)]


def test_two_api_processes_share_a_port(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "api.log"
    processes = _apis(tmp_path, port, "--reuse-port", count=2)
    try:
        assert _healthy(url, time.monotonic() + 60), log.read_text()
        time.sleep(1)  # both have bound by now, or one has failed to
        assert [p.poll() for p in processes] == [None, None], log.read_text()
        processes[0].terminate()
        processes[0].wait(30)
        for _ in range(20):  # new connections, all to the one left
            with httpx.Client() as http:
                assert http.get(f"{url}/healthz").status_code == 200
    finally:
        for process in processes:
            process.kill()
            process.wait(30)


def test_api_workers_are_processes_on_their_own_sockets_started_again_if_they_die(
        tmp_path: Path) -> None:
    """`narrator api --workers 2`: two `--reuse-port` children; one that dies is replaced,
    and SIGTERM stops them all."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "api.log"
    [parent] = _apis(tmp_path, port, "--workers", "2")
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    try:
        assert _healthy(url, time.monotonic() + 60), log.read_text()
        first = [int(pid) for pid in children.read_text().split()]
        assert len(first) == 2
        os.kill(first[0], 9)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = [int(pid) for pid in children.read_text().split()]
            if len(now) == 2 and first[0] not in now:
                break
            time.sleep(0.3)
        assert len(now) == 2, log.read_text()
        assert first[0] not in now
        assert _healthy(url, time.monotonic() + 60)
        parent.terminate()
        assert parent.wait(60) == 0
        for pid in now:
            assert not Path(f"/proc/{pid}").exists() or \
                "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    finally:
        parent.kill()
        parent.wait(30)


def test_api_workers_that_cannot_start_end_the_supervisor(tmp_path: Path) -> None:
    """A taken port: the processes exit at once, and `--workers` gives up with an error
    rather than starting them again forever."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ended = subprocess.run(narrator("api", "--port", str(port), "--workers", "2"),
                               env=_env(tmp_path), capture_output=True, text=True,
                               timeout=120)
    assert ended.returncode != 0
    assert "exited" in ended.stderr
