"""Shared helpers for benchmarks: a served platform, timing, tables and results."""

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
def served(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Run `narrator serve` in a fresh data folder; yield its URL."""
    with tempfile.TemporaryDirectory(prefix="narrator-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NARRATOR_")}
        env |= {"NARRATOR_DATA_DIR": tmp, "NARRATOR_LOG_LEVEL": "WARNING"} | (extra_env or {})
        port = free_port()
        log = open(Path(tmp) / "serve.log", "wb")  # noqa: SIM115
        process = subprocess.Popen([sys.executable, "-P", "-m", "narrator", "serve", "--port",
                                    str(port)], env=env, stdout=log, stderr=log,
                                   start_new_session=True)
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
