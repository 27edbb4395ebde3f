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

With `narrator_whole_window_frames: N` in the connector's extra config (0, the default: the
whole answer at the end), a marked request is instead sent in windows of N new frames with
WINDOW_CONTEXT frames of left context, the first window ending at a point between N/2 and N
that depends on the request id: requests that start together then hand Code2Wav their
windows at different steps, not all at once when they finish (bench/deploy/whole_windows.yaml,
to be measured on the device: a streamed request's first chunk waits in Code2Wav behind
whatever whole decodes are queued before it).

Everything else, streamed requests and cloned voices (their reference codes go with the first
window), goes through vLLM-Omni's own processor, which Narrator keeps from sending a
request's last window twice (`_streamed`). The deploy config names this
function as stage 0's `custom_process_next_stage_input_func`; it runs in the talker's stage
process, which has torch and vLLM-Omni.
"""

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workers.engines import trace
from workers.engines.qwen3_stage1 import REALTIME_TAG

WHOLE = "narrator_whole"
WINDOW_CONTEXT = 25  # frames of left context per window (Code2Wav's own chunking uses 25)
TRACE_FRAMES = 3  # a realtime request's frames traced: the first, and two talker steps


def window_end(request_id: str, sent: int, window: int) -> int:
    """Return how many frames a whole answer must have before its next window is sent:
    the first at a point between window/2 and window set by the request id (zlib.crc32,
    stable across processes), then every `window` frames."""
    if sent:
        return sent + window
    half = max(1, window // 2)
    return half + zlib.crc32(request_id.encode()) % (window - half + 1)


def window_span(length: int, sent: int, context: int) -> tuple[int, int]:
    """Return (first frame, left context frames) of the window that sends frames
    sent..length: up to `context` frames before `sent` go along, to be decoded and cut."""
    start = max(0, sent - context)
    return start, sent - start


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
    extra = _connector_extra(transfer_manager)
    ramp = [max(1, int(n)) for n in extra.get("narrator_stream_ramp") or ()]
    if marked_whole(request) and not cloned:
        window, rid = max(0, int(extra.get("narrator_whole_window_frames") or 0)), \
            request.external_req_id
        return _windowed(stock, transfer_manager, multimodal_output, request, is_finished,
                         lambda sent: window_end(rid, sent, window) if window else 0,
                         WINDOW_CONTEXT)
    if cloned or not ramp:
        payload = _streamed(stock, transfer_manager, multimodal_output, request, is_finished)
    else:
        steady = max(1, int(extra.get("codec_chunk_frames") or 25))
        payload = _windowed(stock, transfer_manager, multimodal_output, request, is_finished,
                            lambda sent: ramp_end(sent, ramp, steady),
                            int(extra.get("codec_left_context_frames") or 72))
    if trace.enabled():
        _trace_frame(transfer_manager, request, payload)
    return payload


def ramp_end(sent: int, ramp: Sequence[int], steady: int) -> int:
    """Return how many frames a streamed request must have before its next window, with
    `narrator_stream_ramp`: windows of the ramp's sizes one after another (1, 2, 4, ...),
    then `steady` frames each. Each window then comes before the one before it has played:
    making twice a window's frames takes less than its audio lasts (a frame is 80 ms; a
    talker step under load 20-45 ms), where vLLM-Omni's own first window of one frame is
    followed by a whole `codec_chunk_frames` window, and a player that starts at once stalls
    (0.16-0.29 s on an H100)."""
    end = 0
    for size in ramp:
        end += size
        if end > sent:
            return end
    return end + steady * ((sent - end) // steady + 1)


def _streamed(stock: Any, transfer_manager: Any, multimodal_output: Any, request: Any,
              is_finished: bool) -> Any:
    """vLLM-Omni's own windows for a streamed request, with its last window sent once.

    The stock processor sends the last `codec_chunk_frames` frames again when it is told a
    request finished after that window already went (the talker's last step ends a window,
    or the request is reported finished twice), and Code2Wav decodes them again: the
    stream's end repeats (vLLM-Omni issue 6600). A finished call that brings no frame
    since the last window sent gets vLLM-Omni's empty finished payload instead, and a
    finished request's frames are let go, so a later call has nothing to send again.
    """
    request_id = request.external_req_id
    payload = stock.talker2code2wav_async_chunk(transfer_manager, multimodal_output,
                                                request, is_finished)
    if payload is None:
        return None
    frames = transfer_manager.code_prompt_token_ids[request_id]
    covered = getattr(transfer_manager, "narrator_streamed", None)
    if covered is None:  # frames covered by the windows sent, per streamed request
        covered = transfer_manager.narrator_streamed = {}
    if not bool(is_finished or request.is_finished()):
        covered[request_id] = len(frames)
        return payload
    repeat = bool(frames) and covered.pop(request_id, None) == len(frames)
    frames.clear()
    if repeat:
        return stock.talker2code2wav_async_chunk(transfer_manager, None, request, True)
    return payload


def _trace_frame(transfer_manager: Any, request: Any, payload: Any) -> None:
    """Trace a realtime request's first TRACE_FRAMES talker frames (bench.engine_trace)."""
    rid = request.external_req_id
    if REALTIME_TAG not in str(rid):
        return
    frames = len(transfer_manager.code_prompt_token_ids.get(rid, ()))
    if frames <= TRACE_FRAMES:
        trace.event("talker_frame", rid=rid, frames=frames, sent=payload is not None)


def _has_reference(output: Mapping[str, Any]) -> bool:
    ref = output.get("codes", {}).get("ref")
    return ref is not None and getattr(ref, "numel", lambda: 0)() > 0


def _windowed(stock: Any, transfer_manager: Any, multimodal_output: Any, request: Any,
              is_finished: bool, until: Callable[[int], int], context: int) -> Any:
    """Narrator's own windows: the frames sent once each, a window whenever the request
    has `until(sent)` frames (0: only at its end), with up to `context` frames before it."""
    import torch
    from vllm_omni.data_entry_keys import CodesStruct, MetaStruct, OmniPayloadStruct

    request_id = request.external_req_id
    frames = transfer_manager.code_prompt_token_ids[request_id]
    if isinstance(multimodal_output, Mapping):
        frame = stock._extract_last_frame(multimodal_output)
        if frame is not None:
            frames.append(frame.cpu().tolist())
    finished = bool(is_finished or request.is_finished())
    sent_by = getattr(transfer_manager, "narrator_sent", None)
    if sent_by is None:  # frames already sent per windowed request, as vLLM-Omni keeps its own
        sent_by = transfer_manager.narrator_sent = {}
    sent = sent_by.get(request_id, 0)
    kind, start, left = next_send(len(frames), sent, until(sent), finished, context)
    if kind == "wait":
        return None
    if finished:
        sent_by.pop(request_id, None)
    if kind == "nothing":  # nothing spoken: vLLM-Omni's own empty finished payload
        return stock.talker2code2wav_async_chunk(transfer_manager, None, request, True)
    if kind == "end":  # every frame went in earlier windows: an empty last one ends it
        frames.clear()  # a second finished call then sends nothing spoken again
        return OmniPayloadStruct(codes=CodesStruct(audio=torch.empty(0, dtype=torch.long)),
                                 meta=MetaStruct(finished=torch.tensor(True)))
    codes = torch.tensor(codebook_major(frames[start:]), dtype=torch.long)
    if finished:
        frames.clear()  # sent: a second finished call for this request sends no frames again
    else:
        sent_by[request_id] = len(frames)
    return OmniPayloadStruct(
        codes=CodesStruct(audio=codes),
        meta=MetaStruct(left_context_size=left,
                        finished=torch.tensor(finished, dtype=torch.bool)),
        speaker=stock.extract_speaker_from_request(request),
        language=stock.extract_language_from_request(request),
    )


def next_send(length: int, sent: int, until: int, finished: bool,
              context: int = WINDOW_CONTEXT) -> tuple[str, int, int]:
    """Decide a windowed request's hand-off after a talker step: (kind, first frame, context).

    kind: "wait" (nothing yet), "window" (frames sent..length, not the last), "last" (the
    rest, finished), "end" (finished with every frame sent earlier: an empty last payload),
    "nothing" (finished having spoken no frame). `until`: the frames the next window waits
    for (0: one "last" at the end).
    """
    if finished:
        if length > sent:
            return ("last", *window_span(length, sent, context))
        return ("end" if sent else "nothing"), 0, 0
    if until and length >= until:
        return ("window", *window_span(length, sent, context))
    return "wait", 0, 0


def _connector_extra(transfer_manager: Any) -> dict[str, Any]:
    """Return the connector's extra config (the deploy config's `connectors: ...: extra`)."""
    connector = getattr(transfer_manager, "connector", None)
    raw = getattr(connector, "config", {}) or {}
    extra = raw.get("extra", raw) if isinstance(raw, dict) else {}
    return extra if isinstance(extra, dict) else {}
