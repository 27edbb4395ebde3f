"""CUDA MPS for a GPU's engines: their stage processes share the GPU at once, not in turns.

vLLM-Omni runs Qwen3-TTS as two processes on one GPU, the talker and Code2Wav, and a GPU
worker runs two engines (the batch engine and the realtime partition). Without MPS the GPU
time-slices between their contexts, so a batch step holds a realtime step back and the other
way round. Under an MPS server their kernels run side by side. The first engine starts an
MPS control daemon before vLLM-Omni spawns its stage processes, with a pipe folder for its
GPU set (CUDA_MPS_PIPE_DIRECTORY, which the stage processes inherit); the other engines on
the same GPUs (the partition, or a second GPU worker) join it; the last one to close quits
it. The batch engine's processes run at below-normal MPS client priority, so a realtime
kernel is scheduled ahead of a batch kernel waiting beside it.

Measured on one H100 (docs/design/realtime-partition.md), the product over HTTP with 4 jobs
filling the batch engine, same machine: streamed first audio p50 / p99 137 / 216 ms with
both engines under the daemon against 194 / 334 ms without MPS; a sync answer of four
sentences 1.38 s against 1.85 s; the first job 0.98 of the run without MPS and the four jobs
together 1.21 of it. With the batch engine also held to 80 % of the SMs
(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) streamed requests came back without audio, so no SM share
is set.

A daemon started for a GPU set (CUDA_VISIBLE_DEVICES=1, as a second GPU worker on a host
runs) sees only those GPUs, and its clients count GPUs among the ones it sees: under it the
engine's processes see the set as 0, 1, ... (a client asking for GPU 1 of a one-GPU daemon
finds none and its stage fails with "No CUDA GPUs are available").

Where the host already runs MPS (CUDA_MPS_PIPE_DIRECTORY set for the worker), the engine
joins that daemon and starts none; its CUDA_VISIBLE_DEVICES must then name GPUs as that
daemon counts them. Where `nvidia-cuda-mps-control` is missing, or the daemon
does not answer, the engine runs without MPS and says so in the log.
"""

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import structlog

log = structlog.get_logger()
CONTROL = "nvidia-cuda-mps-control"
PIPE, LOGS = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
# An MPS client's priority, read when it initialises CUDA: 0 normal, 1 below normal.
PRIORITY = "CUDA_MPS_CLIENT_PRIORITY"
VISIBLE = "CUDA_VISIBLE_DEVICES"
_visible: list[str | None] = []  # the GPU set as the engine was given it, while under a daemon


def folder_for(devices: str | None) -> Path:
    """Return the daemon's folder for this user and GPU set (short: it holds a socket)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", devices or "all")[:40]
    return Path(tempfile.gettempdir()) / f"narrator-mps-{os.getuid()}-{slug}"


def start(background: bool = False) -> Path | None:
    """Start this GPU set's MPS daemon, or join one left running, and point CUDA at it.

    Under a daemon, the engine's processes run at below-normal priority when `background`:
    the batch engine's, so that the realtime partition's kernels start beside a batch step,
    not after it.
    Return the daemon's folder, or None when the engine runs without a daemon of its own.
    Call before the engine initialises CUDA: processes started later inherit the setting.
    """
    client = {PRIORITY: "1" if background else "0"}
    if os.environ.get(PIPE):
        os.environ.update(client)
        log.info("mps.host", pipe=os.environ[PIPE], **client)
        return None
    binary = shutil.which(CONTROL)
    if binary is None:
        log.info("mps.unavailable", reason=f"{CONTROL} not found")
        return None
    visible = _visible[0] if _visible else os.environ.get(VISIBLE)  # as the engine was given
    folder = folder_for(visible)
    env = _environment(folder)
    for sub in (env[PIPE], env[LOGS]):
        Path(sub).mkdir(parents=True, exist_ok=True)
    # A daemon left by an engine that was killed answers on the same pipe: this start then
    # fails, and the engine joins it.
    with contextlib.suppress(subprocess.TimeoutExpired):  # whether one answers decides
        daemon = os.environ | env | ({VISIBLE: visible} if visible else {})  # the given set
        subprocess.run([binary, "-d"], env=daemon, capture_output=True, timeout=30, check=False)
    if not _answers(binary, env):
        log.warning("mps.failed", folder=str(folder),
                    log=_tail(Path(env[LOGS]) / "control.log"))
        return None
    os.environ.update(env | client)
    _visible.append(visible)
    if visible:  # the daemon sees only this set: its clients count from 0 within it
        os.environ[VISIBLE] = ",".join(str(n) for n in range(len(visible.split(","))))
    log.info("mps.started", folder=str(folder), devices=visible, **client)
    return folder


def stop(folder: Path | None) -> None:
    """Quit the daemon `start` returned (after the engine's processes have ended), unless
    another engine on the same GPUs still has processes under it: the last one out quits.

    A quit daemon refuses new clients while the old ones finish, so quitting under a second
    engine (two GPU workers on one GPU) would leave that engine unable to start a stage
    process again.
    """
    os.environ.pop(PRIORITY, None)
    if folder is None:
        return
    if _visible and (visible := _visible.pop()) is not None:
        os.environ[VISIBLE] = visible
    env = _environment(folder)
    for name in env:
        if os.environ.get(name) == env[name]:
            del os.environ[name]
    binary = shutil.which(CONTROL)
    if binary is None:
        return
    if clients := _clients(binary, env):
        log.info("mps.left_running", folder=str(folder), clients=len(clients))
        return
    _ask(binary, env, "quit")
    log.info("mps.stopped", folder=str(folder))


def _environment(folder: Path) -> dict[str, str]:
    return {PIPE: str(folder / "pipe"), LOGS: str(folder / "log")}


def _ask(binary: str, env: dict[str, str], command: str) -> str | None:
    """Send the daemon one command; its answer, or None when it does not answer."""
    try:
        done = subprocess.run([binary], input=f"{command}\n", text=True, env=os.environ | env,
                              capture_output=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return None
    return done.stdout if done.returncode == 0 else None


def _answers(binary: str, env: dict[str, str]) -> bool:
    return _ask(binary, env, "get_server_list") is not None


def _clients(binary: str, env: dict[str, str]) -> list[str]:
    """The pids of the processes still under the daemon's MPS servers (one per line each)."""
    servers = (_ask(binary, env, "get_server_list") or "").split()
    return [pid for server in servers
            for pid in (_ask(binary, env, f"get_client_list {server}") or "").split()]


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-400:]
    except OSError:
        return ""
