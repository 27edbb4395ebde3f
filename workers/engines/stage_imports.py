"""Imported by the stage forkserver (forkserver.py): what a stage process needs, without CUDA.

A process forked from one that has initialised CUDA cannot use CUDA, so nothing here may
initialise it. vLLM imports without touching CUDA, but vLLM-Omni 0.26's import asks torch for
the GPU's compute capability (`quantization/quack_fp8.py`: FP8 GEMMs through quack on
datacenter Blackwell, capability 10), which initialises CUDA. Here that capability is read
from NVML instead (vLLM's platform, which does not initialise CUDA), and handed to that check
through its own override, VLLM_OMNI_USE_QUACK_FP8, in the forkserver only: a stage process
takes the engine's environment before it runs. Any other attempt to initialise CUDA during
these imports raises instead; the module that made it is then left for the stage to import.
"""

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.cuda

QUACK = "VLLM_OMNI_USE_QUACK_FP8"
STAGE_MODULES = [
    "vllm_omni.engine.stage_engine_core_proc",  # the stage process's entry point
    "vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_talker",
    "vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav",
]


@contextmanager
def cuda_refused() -> Iterator[None]:
    """Make any CUDA initialisation inside the block raise instead of happening."""
    lazy_init = torch.cuda._lazy_init

    def refuse() -> None:
        raise RuntimeError("the stage forkserver must not initialise CUDA")

    torch.cuda._lazy_init = refuse
    try:
        yield
    finally:
        torch.cuda._lazy_init = lazy_init


def capability_major() -> int | None:
    """Return the GPU's compute capability major from NVML; None where NVML cannot tell."""
    with cuda_refused():
        try:
            from vllm.platforms import current_platform

            capability = current_platform.get_device_capability()
        except Exception:  # no NVML: vLLM would ask torch, which needs CUDA
            return None
    return capability.major if capability is not None else None


def preload() -> list[str]:
    """Import the stage modules that import without CUDA; return those that did not."""
    import vllm.v1.engine.async_llm  # noqa: F401  (what vLLM's own forkserver preloads)

    major = capability_major()
    if major is None and QUACK not in os.environ:
        return STAGE_MODULES  # vLLM-Omni's import would need CUDA to decide
    os.environ.setdefault(QUACK, "1" if major == 10 else "0")
    left = []
    with cuda_refused():
        for name in STAGE_MODULES:
            try:
                __import__(name)
            except Exception as error:
                print(f"stage forkserver: {name} left to the stage: {error}", file=sys.stderr)
                left.append(name)
    return left


LEFT = preload()
