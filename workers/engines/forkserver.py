"""vLLM-Omni's stage processes forked ready-imported, not spawned to import everything again.

vLLM-Omni 0.26 starts each stage process (talker, Code2Wav) with `spawn`, one after the
other, and each imports torch, vLLM and vLLM-Omni afresh: 29 s and 35 s of a 150 s warm
start on an H100 (docs/gpu-measurements.md). Here a forkserver is started as the engine starts;
it imports those modules once, at the same time as the engine's own import, and each stage
process is then forked from it with the imports done. The forkserver never initialises CUDA
(stage_imports.py), so forking it is as safe as vLLM's own
`VLLM_WORKER_MULTIPROC_METHOD=forkserver`.

A forked child starts with the forkserver's environment, not the engine's at the moment the
stage starts, and vLLM-Omni sets a stage's environment just before it starts it (its
devices, the deploy config's `runtime.env`, `VLLM_ALLOW_LONG_MAX_MODEL_LEN`). So each stage
process carries the engine's environment of that moment and takes it as its own before it
runs anything.
"""

import multiprocessing
import multiprocessing.context
import os
from multiprocessing import forkserver
from typing import Any

import structlog

log = structlog.get_logger()
# What a stage process imports before it serves: vLLM, vLLM-Omni's stage entry point and the
# model's modules (stage_imports.py says how without CUDA), and Narrator's stage schedulers.
PRELOAD = ["workers.engines.stage_imports", "workers.engines.qwen3_stage1"]


class EnvironProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that runs in its starter's environment of the moment."""

    _environ: dict[str, str]

    def start(self) -> None:
        """Record the starter's environment, then start the process from the forkserver."""
        self._environ = dict(os.environ)
        super().start()

    def run(self) -> None:
        """Take the starter's environment, then run the target."""
        os.environ.clear()
        os.environ.update(self._environ)
        super().run()


class EnvironContext(multiprocessing.context.ForkServerContext):
    """The forkserver context whose processes are EnvironProcess."""

    Process = EnvironProcess


def start(preload: list[str] = PRELOAD) -> EnvironContext:
    """Start the forkserver importing `preload` now, in the background; return its context."""
    context = EnvironContext()
    context.set_forkserver_preload(preload)
    forkserver.ensure_running()  # returns at once; the first fork waits for the imports
    return context


def install(context: EnvironContext) -> None:
    """Start vLLM-Omni's stage processes from `context` (after `import vllm_omni`).

    A vLLM-Omni without that module (another version, or the tests' engine double) keeps
    its own start method, and the log says so.
    """
    try:
        from vllm_omni.engine import stage_engine_core_proc_manager as manager
    except ImportError as error:
        log.warning("engine.forkserver_unused", reason=str(error))
        return

    def mp_context() -> Any:
        return context

    manager.get_mp_context = mp_context
