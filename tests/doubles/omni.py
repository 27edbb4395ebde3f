"""The test double at the GPU engine boundary: AsyncOmni's generate() on the CPU.

FakeOmni gives audio made of the request's marker value (the length of its text), in the
three output shapes vLLM-Omni can produce; SlowOmni adds time per frame like a GPU step.
The adapter tests use them in process; tests/doubles/site/ puts SlowOmni where a real
worker process imports `vllm_omni.AsyncOmni`.
"""

import asyncio
import os
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import numpy as np

from workers.engines.qwen3_tts import OutputKind

# Samples per frame in the fake, instead of 1920; bench.gpu_product --double can ask for
# the real size (NARRATOR_TEST_OMNI_SAMPLES_PER_FRAME) to see the worker's cost per segment.
SCALE = int(os.environ.get("NARRATOR_TEST_OMNI_SAMPLES_PER_FRAME", "10"))


class FakeTensor:
    """Quacks like a torch tensor on a GPU."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def detach(self) -> "FakeTensor":
        return self

    def float(self) -> "FakeTensor":
        return self

    def cpu(self) -> "FakeTensor":
        return self

    def numpy(self) -> np.ndarray:
        return self.values


def output(audio: Any) -> Any:
    completion = SimpleNamespace(multimodal_output={"audio": audio})
    return SimpleNamespace(request_output=SimpleNamespace(outputs=[completion]))


class FakeOmni:
    """AsyncOmni's generate(): audio made of the request's marker value, in chunks."""

    def __init__(self, shape: str) -> None:
        self.shape = shape
        self.calls: list[dict[str, Any]] = []
        self.shut_down = 0
        self.default_sampling_params_list = [
            SimpleNamespace(max_tokens=4096, min_tokens=2, seed=None, extra_args=None,
                            output_kind=None),
            SimpleNamespace(max_tokens=65536, output_kind=None)]

    def shutdown(self) -> None:
        self.shut_down += 1

    async def generate(self, prompt: dict[str, Any], request_id: str,
                       sampling_params_list: list[Any], priority: int) -> AsyncIterator[Any]:
        self.calls.append({"prompt": prompt, "request_id": request_id,
                           "params": sampling_params_list, "priority": priority})
        frames = sampling_params_list[0].max_tokens
        marker = float(len(prompt["additional_information"]["text"][0]))
        chunks = [np.full(SCALE * min(25, frames - start), marker, dtype=np.float32)
                  for start in range(0, frames, 25)]
        kind = sampling_params_list[0].output_kind
        yield SimpleNamespace(request_output=None, multimodal_output=None)  # a stage-0 output
        for n in range(len(chunks)):
            await asyncio.sleep(0)  # let other requests interleave
            if kind is OutputKind.DELTA:
                yield output([FakeTensor(chunks[n])])
            elif kind is OutputKind.CUMULATIVE:
                yield output([FakeTensor(c) for c in chunks[: n + 1]])
        if kind is OutputKind.FINAL_ONLY:
            whole = np.concatenate(chunks)
            yield output(FakeTensor(whole) if self.shape == "tensor" else
                         [FakeTensor(c) for c in chunks])


class SlowOmni(FakeOmni):
    """FakeOmni that takes `seconds_per_frame` per frame, as a GPU step would: a streamed
    request's chunks come as their frames are made, a whole one's audio at its end.

    `peak` is the most requests it has held at once (the engine's batch size); `held` maps
    the request ids it holds now to their priorities (what a step of it carries).
    """

    def __init__(self, shape: str = "chunks", seconds_per_frame: float = 0.002) -> None:
        super().__init__(shape)
        self.seconds_per_frame = seconds_per_frame
        self.running = self.peak = 0
        self.held: dict[str, int] = {}

    async def generate(self, prompt: dict[str, Any], request_id: str,
                       sampling_params_list: list[Any], priority: int) -> AsyncIterator[Any]:
        self.running += 1  # on the engine's one event loop: no lock needed
        self.peak = max(self.peak, self.running)
        self.held[request_id] = priority
        frames, made = sampling_params_list[0].max_tokens, 0
        whole = sampling_params_list[0].output_kind is OutputKind.FINAL_ONLY
        try:
            async for item in super().generate(prompt, request_id, sampling_params_list,
                                               priority):
                if item.request_output is not None:  # audio: its frames take their time
                    step = frames - made if whole else min(25, frames - made)
                    await asyncio.sleep(step * self.seconds_per_frame)
                    made += step
                    self.stepped(request_id)
                yield item
        finally:
            self.running -= 1
            del self.held[request_id]

    def stepped(self, request_id: str) -> None:
        """Called after each of a request's steps (chunks); the worker's double logs them."""
