"""What a Piper worker holds while it makes a book: the peak resident memory of every process
of `narrator serve` (embedded defaults, as a new user runs it) during one long job.

    python -m bench.book_memory [--file /usr/share/common-licenses/GPL-3] [--format mp3]

The book is Debian's GPL-3 text (35,149 characters) as one plain-text job with SRT and VTT
subtitles. The bench samples /proc every 0.2 s for every descendant of the serve process and
reports each one's peak, the peak of their sum, and whether a worker process was replaced
(recycled past WORKER_MAX_RSS_MB, 2,048 MiB by default). Writes
bench/results/book_memory.json.
"""

import argparse
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import rss_mib, save, served, table

GPL3 = Path("/usr/share/common-licenses/GPL-3")


def descendants(root: int) -> dict[int, str]:
    """Every process under `root` (Linux /proc), with the start of its command line."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                try:
                    line = (Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
                            .decode(errors="replace").strip())
                except OSError:
                    continue
                found[child] = _role(line)
                frontier.append(child)
    return found


def _role(command: str) -> str:
    for word, role in (("worker", "worker"), ("api", "api"), ("aligner", "aligner")):
        if f" {word}" in command:
            return role
    return command.split(" -c ")[0][-60:] or "?"


class Sampler:
    """Sample the RSS of every process under the serve process until stopped."""

    def __init__(self) -> None:
        self.root = 0
        self.peaks: dict[int, tuple[str, float]] = {}
        self.total_peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, process: subprocess.Popen[bytes]) -> None:
        self.root = process.pid
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            total = 0.0
            for pid, role in {self.root: "serve", **descendants(self.root)}.items():
                rss = rss_mib(pid)
                total += rss
                if rss > self.peaks.get(pid, ("", 0.0))[1]:
                    self.peaks[pid] = (role, rss)
            self.total_peak = max(self.total_peak, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    """Run one book job through `narrator serve` and report what its processes held."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=GPL3)
    parser.add_argument("--format", default="mp3")
    args = parser.parse_args()
    text = args.file.read_text()
    sampler = Sampler()
    with served(started=sampler.start) as url:
        time.sleep(2.0)  # the idle level, after the worker's warm-up
        idle = {pid: rss for pid, (_, rss) in sampler.peaks.items()}
        started = time.monotonic()
        job = httpx.post(f"{url}/v1/audio/jobs", json={
            "input": text, "response_format": args.format, "subtitles": ["srt", "vtt"]},
            timeout=60).json()
        while job["status"] not in ("completed", "failed", "cancelled"):
            time.sleep(1.0)
            job = httpx.get(f"{url}/v1/audio/jobs/{job['id']}", timeout=30).json()
        seconds = time.monotonic() - started
        sampler.stop()
    rows: list[list[Any]] = []
    workers = [pid for pid, (role, _) in sampler.peaks.items() if role == "worker"]
    for pid, (role, peak) in sorted(sampler.peaks.items(), key=lambda p: -p[1][1]):
        if peak >= 20:  # helpers (forkservers, resource trackers) left out
            rows.append([role, pid, f"{idle.get(pid, 0):.0f}", f"{peak:.0f}"])
    print(table(["process", "pid", "RSS before the job MiB", "peak MiB"], rows))
    print(f"\nall of them together, peak: {sampler.total_peak:.0f} MiB; job {job['status']} in "
          f"{seconds:.1f} s ({len(text):,} characters, {job['segments']['total']} segments); "
          f"worker processes seen: {len(workers)} (more than one: a recycle)")
    save("book_memory", {"file": str(args.file), "characters": len(text),
                         "format": args.format, "status": job["status"], "seconds": seconds,
                         "segments": job["segments"]["total"],
                         "total_peak_mib": sampler.total_peak, "worker_processes": len(workers),
                         "processes": [dict(zip(["role", "pid", "idle_mib", "peak_mib"], r,
                                                strict=True)) for r in rows]})


if __name__ == "__main__":
    main()
