"""Where a GPU worker's processes spend their time, from `bench.gpu_product --profile`'s
py-spy samples: a table per process (its role, how busy its main thread was, how much of that
was waiting on the GPU, how often it held the GIL), then, for each main thread busy more than
half the time, the functions that took its time (inclusive: a function and what it called).

    python -m bench.spy_table worker_spy.txt [--gil worker_spy_gil.txt] [--top 25]

The inputs are py-spy's raw folded stacks, one line per distinct stack ending in its sample
count: `worker_spy.txt` recorded every thread, idle ones too (`--idle`), `worker_spy_gil.txt`
only the threads holding the GIL (`--gil`), both at the same rate and for the same length,
one after the other. A thread is counted as waiting when its innermost frame is one of the
blocking calls below; waiting on the GPU (a CUDA event or stream synchronize) is counted
apart. The GIL share is the second file's samples of a process over the first file's samples
of its main thread: where py-spy missed some instants of a process (it reads a running
process without stopping it), the share reads high by that much. py-spy sees Python frames
only: time in a C call (a CUDA launch, a torch op) is charged to the Python line that made it.
"""

import argparse
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PROCESS = re.compile(r'process (\d+):"[^"]*"')
# Innermost frames of a thread that is blocked, not running (py-spy --idle keeps them).
WAITING = re.compile(r"^(Condition\.wait|EpollSelector\.select|_epoll\.poll|socket\.accept|"
                     r"Connection\._recv|_ConnectionBase\.recv|Semaphore\.acquire|sleep|"
                     r"Event\.wait|Socket\.recv_multipart|Socket\.poll|select|main) ")
GPU_WAIT = re.compile(r"^(Event|Stream)\.synchronize |^synchronize ")
LINE = re.compile(r":\d+\)$")


@dataclass
class Thread:
    samples: int = 0
    waiting: int = 0
    gpu: int = 0
    functions: Counter[str] = field(default_factory=Counter)
    lines: Counter[str] = field(default_factory=Counter)  # innermost frames, with their line


@dataclass
class Process:
    parent: str
    threads: dict[str, Thread] = field(default_factory=lambda: defaultdict(Thread))
    markers: set[str] = field(default_factory=set)
    gil: int = 0


def parse(line: str) -> tuple[list[str], str, list[str], int]:
    """One folded line: its process chain (pids), thread name, code frames, sample count."""
    stack, _, count = line.rstrip().rpartition(" ")
    stack = PROCESS.sub(r"process \1", stack)  # a command line may hold ';'
    frames = stack.split(";")
    pids = [f.split()[1] for f in frames if f.startswith("process ")]
    thread = next((f.split(": ")[-1] for f in frames if f.startswith("thread ")), "-")
    code = [f for f in frames if not f.startswith(("process ", "thread "))]
    return pids, thread, code, int(count)


def read(path: Path, gil: Path | None) -> dict[str, Process]:
    processes: dict[str, Process] = {}
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        pids, name, code, count = parse(line)
        process = processes.setdefault(pids[-1], Process(pids[-2] if len(pids) > 1 else "-"))
        thread = process.threads[name]
        thread.samples += count
        leaf = code[-1] if code else ""
        thread.waiting += count * bool(WAITING.match(leaf))
        thread.gpu += count * bool(GPU_WAIT.match(leaf))
        thread.lines[leaf] += count
        for function in {LINE.sub(")", f) for f in code}:
            thread.functions[function] += count
        process.markers.update(m for m in ("GPUARModelRunner", "GPUGenerationModelRunner",
                                           "run_stage_core", "forkserver.py") if m in line)
        if name == "orchestrator":
            process.markers.add("orchestrator")
    for line in gil.read_text(errors="replace").splitlines() if gil else []:
        if line.strip():
            pids, _, _, count = parse(line)
            if pids[-1] in processes:
                processes[pids[-1]].gil += count
    return processes


def role(pid: str, process: Process) -> str:
    markers = process.markers
    if "GPUARModelRunner" in markers:
        return "talker (stage 0)"
    if "GPUGenerationModelRunner" in markers:
        return "Code2Wav (stage 1)"
    if "run_stage_core" in markers:
        return "stage process, idle"
    if "orchestrator" in markers:
        return "engine process"
    if process.parent == "-":
        return "GPU worker"
    return "forkserver or standby"


def main_thread(process: Process) -> Thread:
    return process.threads.get("MainThread") or max(process.threads.values(),
                                                    key=lambda t: t.samples)


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def report(processes: dict[str, Process], top: int) -> str:
    rows = ["| process | role | parent | main thread not blocked | of which waiting on the GPU "
            "| GIL held (all threads) |", "|---|---|---|---|---|---|"]
    busy = []
    for pid, process in sorted(processes.items(), key=lambda kv: int(kv[0])):
        main = main_thread(process)
        running = main.samples - main.waiting
        rows.append(f"| {pid} | {role(pid, process)} | {process.parent} | "
                    f"{share(running, main.samples)} | {share(main.gpu, main.samples)} | "
                    f"{share(process.gil, main.samples)} |")
        if main.samples and running > main.samples / 2:
            busy.append((pid, process, main))
    for pid, process, main in busy:
        rows += ["", f"Main thread of {pid} ({role(pid, process)}), {main.samples} samples: "
                 "the lines it was on (innermost frame)", "", "| share | line |", "|---|---|"]
        rows += [f"| {share(n, main.samples)} | `{f}` |" for f, n in main.lines.most_common(8)
                 if n >= main.samples * 0.02]
        rows += ["", "and the share of its time in each function with what that called", "",
                 "| share | function |", "|---|---|"]
        everywhere = main.samples * 0.95  # the frames under every sample say nothing
        shown = [(f, n) for f, n in main.functions.most_common() if n < everywhere]
        rows += [f"| {share(n, main.samples)} | `{f}` |" for f, n in shown[:top]
                 if n >= main.samples * 0.02]
    return "\n".join(rows)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy raw output, every thread (--idle)")
    parser.add_argument("--gil", type=Path, help="py-spy raw output, GIL holders only (--gil)")
    parser.add_argument("--top", type=int, default=25, help="functions shown per busy thread")
    args = parser.parse_args()
    print(report(read(args.profile, args.gil), args.top))


if __name__ == "__main__":
    cli()
