"""Talker → Code2Wav hand-off for Narrator's deploy config: whole answers decode once.

vLLM-Omni (async_chunk) sends every request's codec frames to Code2Wav in windows: 25 new
frames with 72 frames of left context, so a 250-frame segment costs ten 97-frame decodes,
about 3.9 times its length, and with 64 segments in flight those windows keep Code2Wav busy
beside the talker on the same GPU, where a streamed request's first chunk waits its turn.
A request nobody streams (a job's segment, a sync answer returned whole) gains nothing from
the windows. The adapter marks those with `WHOLE` in their `additional_information`
(workers/engines/vllm_omni.py); for them this hook keeps the frames and sends them once, all
of them, when the talker finishes, and Code2Wav decodes the sequence in one pass (its own
300-frame chunking with 25 frames of context, as in vLLM-Omni's non-streaming mode).

Everything else, streamed requests and cloned voices (their reference codes go with the first
window), goes through vLLM-Omni's own processor unchanged. The deploy config names this
function as stage 0's `custom_process_next_stage_input_func`; it runs in the talker's stage
process, which has torch and vLLM-Omni.
"""

from collections.abc import Mapping, Sequence
from typing import Any

WHOLE = "narrator_whole"


def marked_whole(request: Any) -> bool:
    """Say whether the talker request carries the adapter's whole-answer mark."""
    info = getattr(request, "additional_information", None)
    entries = getattr(info, "entries", None)
    if not entries or WHOLE not in entries:
        return False
    data = getattr(entries[WHOLE], "list_data", None)
    return bool(data and data[0])


def codebook_major(frames: Sequence[Sequence[int]]) -> list[int]:
    """Flatten [frame][codebook] codes codebook-major ([q*F]), as Code2Wav reads them."""
    if not frames:
        return []
    return [frame[q] for q in range(len(frames[0])) for frame in frames]


def talker2code2wav(transfer_manager: Any, multimodal_output: Any, request: Any,
                    is_finished: bool = False) -> Any:
    """Build stage 1's input for one talker step (None: nothing to send yet)."""
    from vllm_omni.model_executor.stage_input_processors import qwen3_tts as stock

    payload = getattr(transfer_manager, "request_payload", None) or {}
    cloned = payload.get(request.external_req_id) is not None or (
        isinstance(multimodal_output, Mapping) and _has_reference(multimodal_output))
    if cloned or not marked_whole(request):
        return stock.talker2code2wav_async_chunk(transfer_manager, multimodal_output, request,
                                                 is_finished)
    return _whole(stock, transfer_manager, multimodal_output, request, is_finished)


def _has_reference(output: Mapping[str, Any]) -> bool:
    ref = output.get("codes", {}).get("ref")
    return ref is not None and getattr(ref, "numel", lambda: 0)() > 0


def _whole(stock: Any, transfer_manager: Any, multimodal_output: Any, request: Any,
           is_finished: bool) -> Any:
    import torch
    from vllm_omni.data_entry_keys import CodesStruct, MetaStruct, OmniPayloadStruct

    request_id = request.external_req_id
    frames = transfer_manager.code_prompt_token_ids[request_id]
    if isinstance(multimodal_output, Mapping):
        frame = stock._extract_last_frame(multimodal_output)
        if frame is not None:
            frames.append(frame.cpu().tolist())
    if not (is_finished or request.is_finished()):
        return None
    if not frames:  # nothing spoken: vLLM-Omni's own empty finished payload
        return stock.talker2code2wav_async_chunk(transfer_manager, None, request, True)
    codes = torch.tensor(codebook_major(frames), dtype=torch.long)
    frames.clear()  # sent: a second finished call for this request sends no frames again
    return OmniPayloadStruct(
        codes=CodesStruct(audio=codes),
        meta=MetaStruct(left_context_size=0, finished=torch.tensor(True, dtype=torch.bool)),
        speaker=stock.extract_speaker_from_request(request),
        language=stock.extract_language_from_request(request),
    )
