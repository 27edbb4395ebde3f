"""vLLM-Omni 0.26's talker → Code2Wav windowing for streamed requests, on the CPU.

The engine double's stand-in for `vllm_omni.model_executor.stage_input_processors.qwen3_tts`
(its `talker2code2wav_async_chunk`), kept to what decides which frames a window carries: a
window every CHUNK frames with CONTEXT frames of left context, and when the request is
finished, the frames since the last whole window, or a whole CHUNK if that remainder is
empty. That last rule is how the stock processor sends a window twice (vLLM-Omni issue 6600).
Frames are lists of codes; payloads are namespaces with the window's frames.
"""

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

CHUNK = 25
CONTEXT = 25


def talker2code2wav_async_chunk(transfer_manager: Any, multimodal_output: Any, request: Any,
                                is_finished: bool = False) -> Any:
    request_id = request.external_req_id
    finished = bool(is_finished or request.is_finished())
    frames = transfer_manager.code_prompt_token_ids[request_id]
    if isinstance(multimodal_output, Mapping):
        frame = multimodal_output.get("codes", {}).get("audio")
        if frame is not None:
            frames.append(frame)
    elif not finished:
        return None
    if not frames:
        return SimpleNamespace(frames=[], left_context_size=0, finished=True) if finished else None
    if not finished and len(frames) % CHUNK:
        return None
    new = len(frames) % CHUNK or CHUNK
    end = min(len(frames), CONTEXT + new)
    return SimpleNamespace(frames=list(frames[-end:]), left_context_size=end - new,
                           finished=finished)
