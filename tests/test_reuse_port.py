"""`narrator api --reuse-port`: several API processes on one port (SO_REUSEPORT), each
answering; the port stays served when one of them stops."""

import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.support import free_port, narrator


def _healthy(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def test_two_api_processes_share_a_port(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")} | {
        "NARRATOR_DATA_DIR": str(tmp_path)}
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        processes = [subprocess.Popen(narrator("api", "--port", str(port), "--reuse-port"),
                                      env=env, stdout=out, stderr=out) for _ in range(2)]
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


def test_reuse_port_is_one_process_each() -> None:
    refused = subprocess.run(narrator("api", "--workers", "2", "--reuse-port"),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "one process each" in refused.stderr
