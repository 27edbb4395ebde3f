"""Worker recycling: past a task count or a resident size, a worker restarts itself.

A long-lived worker's memory creeps (about 1.9 KB per job in the 10,000-job soak, cause not
found). Past WORKER_MAX_TASKS tasks or WORKER_MAX_RSS_MB of resident memory, the worker
stops the way SIGTERM stops it (it takes nothing new, finishes or hands back what it holds)
and then replaces itself with a fresh copy of the same command (exec: same pid, so a
supervisor or `narrator serve` sees one long-lived process). SIGHUP recycles at once.

A GPU worker's engine runs in a child process (workers/engines/engine_process.py): the worker
detaches from it before the exec, and the new image adopts it, warm, instead of starting one.
"""

import os
import resource
import sys
import threading

import structlog

log = structlog.get_logger()


def rss_mb() -> float:
    """Return this process's resident memory in MiB (Linux; elsewhere, the peak)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Recycler:
    """Counts finished tasks; says once when the worker is due for a restart."""

    def __init__(self, max_tasks: int, max_rss_mb: float) -> None:
        self.max_tasks, self.max_rss_mb = max_tasks, max_rss_mb
        self.tasks = 0
        self.due = False
        self._lock = threading.Lock()  # task_postrun comes from every pool thread

    def task_done(self) -> str:
        """Count a task; return why the worker must restart now, once, or ''."""
        with self._lock:
            self.tasks += 1
            if self.due:
                return ""
            reason = ""
            if self.max_tasks and self.tasks >= self.max_tasks:
                reason = f"{self.tasks} tasks (WORKER_MAX_TASKS {self.max_tasks})"
            elif self.max_rss_mb and (rss := rss_mb()) > self.max_rss_mb:
                reason = f"{rss:.0f} MiB resident (WORKER_MAX_RSS_MB {self.max_rss_mb:g})"
            self.due = bool(reason)
            return reason

    def force(self) -> bool:
        """Make the worker due now (SIGHUP); False if it already was."""
        with self._lock:
            was, self.due = self.due, True
            return not was


def restart() -> None:
    """Replace this process with a fresh run of the same command line."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
