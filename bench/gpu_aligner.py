"""Qwen3-ForcedAligner (workers/aligners/qwen3.py) or, with --recognizer, Qwen3-ASR
(workers/aligners/qwen3_asr.py) on the GPU: load time, time per audio second alone and with
many segments at once, GPU memory. Timing only: random weights.

No checkpoint can be downloaded here, so `--build` writes a model folder in the released
checkpoint's layout (config.json with Qwen3-ForcedAligner-0.6B's sizes as published: a
24-layer audio encoder of width 1024, a 28-layer text decoder of width 1024, 5,000 time bins
of 80 ms; the Qwen3 tokenizer with the audio and timestamp tokens at their ids; Whisper's
128-bin feature extractor at 16 kHz) and the aligner loads it with vLLM's `dummy` weights:
the GPU does the real model's work, and the words land anywhere.

The audio is noise at 24 kHz (what Qwen3-TTS writes; the model's processor resamples it to
16 kHz, as in the product), and each segment has the words of about 20 s of speech. What this
leaves out: the align task around it (reading the part from storage, writing the words), and
sharing the GPU with a TTS engine.

--recognizer builds Qwen3-ASR's folder the same way (the same published 0.6B sizes as the
aligner's, which Narrator has for that family; the ASR checkpoint's own encoder sizes are not
checked) and times hearing segments: random weights never stop, so each answer runs to the
recogniser's token bound for the segment's words. --both then loads the aligner as well, in
the same process (as a worker with ALIGNER=qwen3 and RECOGNIZER=qwen3 has them), and aligns
and hears the same segments at once.

--shift FOLDER aligns the same segments with the prompt vLLM-Omni 0.26 builds (a chat turn
around the audio and the words) and with Narrator's (the official aligner's, no chat turn),
and prints how much later the first puts the word marks. It aligns the bench's noise
segments, so even with the released weights in FOLDER it shows what the prompt alone moves,
not accuracy on speech (vLLM-Omni pull request 7240 measured +92 ms on real speech); with
random weights it only shows that the two prompts give the model different inputs.

    python -m bench.gpu_aligner --build /tmp/fa --tokenizer /tmp/tok [--batch 32]
    python -m bench.gpu_aligner --build /tmp/asr --recognizer [--both /tmp/fa]
    python -m bench.gpu_aligner --build /tmp/fa --shift /path/to/Qwen3-ForcedAligner-0.6B
"""

import argparse
import json
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import GpuBusy, save, table
from workers.aligners import words_of
from workers.aligners.qwen3 import Qwen3Aligner
from workers.aligners.qwen3_asr import Qwen3Recognizer

RATE = 24_000
TEXT = ("The river bends twice before it reaches the town, and in the spring the water rises "
        "over the lower fields. Farmers move their animals to the hill pastures early in "
        "April, and the children walk to school along the old railway line, which stays dry "
        "when every road is under water. By June the fields are green again.")
SECONDS = 20.0

# Published sizes of Qwen3-ForcedAligner-0.6B (config.json's thinker_config).
AUDIO = {"num_mel_bins": 128, "encoder_layers": 24, "encoder_attention_heads": 16,
         "encoder_ffn_dim": 4096, "d_model": 1024, "max_source_positions": 1500,
         "n_window": 50, "output_dim": 1024, "n_window_infer": 800,
         "downsample_hidden_size": 480, "scale_embedding": False}
TEXT_MODEL = {"vocab_size": 152064, "hidden_size": 1024, "intermediate_size": 3072,
              "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
              "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
              "tie_word_embeddings": False, "max_position_embeddings": 65536,
              "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                               "interleaved": True, "mrope_interleaved": True}}
TOKENS = {151669: "<|audio_start|>", 151670: "<|audio_end|>", 151676: "<|audio_pad|>",
          151705: "<timestamp>"}


def build(out: Path, tokenizer: Path, recognizer: bool = False) -> None:
    """Write the model folder (no weights: vLLM's dummy ones are loaded)."""
    out.mkdir(parents=True, exist_ok=True)
    thinker = {"model_type": "qwen3_forced_aligner", "classify_num": 5000}
    if recognizer:
        thinker = {"model_type": "qwen3_asr_thinker"}
    config = {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
              "timestamp_token_id": 151705, "timestamp_segment_time": 80,
              "torch_dtype": "bfloat16",
              "thinker_config": thinker | {
                  "audio_token_id": 151676, "audio_start_token_id": 151669,
                  "audio_end_token_id": 151670, "user_token_id": 872,
                  "audio_config": AUDIO, "text_config": TEXT_MODEL}}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
        "sampling_rate": 16000, "hop_length": 160, "chunk_length": 30, "n_fft": 400,
        "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
        "padding_value": 0.0, "return_attention_mask": True,
        "processor_class": "Qwen3ASRProcessor"}, indent=1))
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(tokenizer / name, out / name)
    fast = json.loads((tokenizer / "tokenizer.json").read_text())
    settings = json.loads((tokenizer / "tokenizer_config.json").read_text())
    last = max(t["id"] for t in fast["added_tokens"])
    for token_id in range(last + 1, max(TOKENS) + 1):  # the ids between: reserved
        content = TOKENS.get(token_id, f"<|asr_reserved_{token_id}|>")
        fast["added_tokens"].append({"id": token_id, "content": content, "single_word": False,
                                     "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": True})
        settings.setdefault("added_tokens_decoder", {})[str(token_id)] = {
            "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}
    settings |= {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                 "audio_eos_token": "<|audio_end|>"}
    (out / "tokenizer.json").write_text(json.dumps(fast))
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=1))


def segment(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.1, int(SECONDS * RATE)).astype(np.float32)


def main() -> None:
    """Load the model, time it alone and under concurrency, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, required=True, help="the model folder to write")
    parser.add_argument("--tokenizer", type=Path, default=Path("/tmp/tok"))
    parser.add_argument("--recognizer", action="store_true", help="Qwen3-ASR, not the aligner")
    parser.add_argument("--both", type=Path, default=None, metavar="ALIGNER_FOLDER",
                        help="with --recognizer: then the aligner too, in this process")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--memory", type=float, default=0.3)
    parser.add_argument("--alone", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--label", default="gpu_aligner")
    parser.add_argument("--shift", type=Path, default=None, metavar="CHECKPOINT",
                        help="compare vLLM-Omni's prompt with Narrator's on this checkpoint")
    args = parser.parse_args()
    if args.shift:
        return shift(args.shift, args.memory, args.label)
    build(args.build, args.tokenizer, args.recognizer)
    busy = GpuBusy()
    model: Any = (Qwen3Recognizer if args.recognizer else Qwen3Aligner)(
        str(args.build), memory=args.memory, batch=args.batch, load_format="dummy")
    call = model.transcribe if args.recognizer else model.align
    started = time.monotonic()
    model.start()
    loaded = time.monotonic() - started
    words = len(words_of(TEXT))
    first = call(segment(0), RATE, TEXT)  # also the first-call compile
    print("first call:", None if first is None else f"{len(first)} words (text: {words})",
          flush=True)
    out: dict[str, Any] = {"load_s": loaded, "words": words,
                           "first_words": None if first is None else len(first)}
    alone = []
    for n in range(args.alone):
        t = time.perf_counter()
        call(segment(n + 1), RATE, TEXT)
        alone.append(time.perf_counter() - t)
    out["alone_s"] = alone
    name = "Qwen3-ASR" if args.recognizer else "Qwen3-ForcedAligner"
    rows = [[f"{name}: load (dummy weights) to ready", f"{loaded:.1f} s", ""],
            [f"one {SECONDS:.0f} s segment alone (median of {args.alone})",
             f"{statistics.median(alone) * 1000:.0f} ms",
             f"{statistics.median(alone) * 1000 / SECONDS:.1f} ms per audio-s"]]
    for c in args.concurrency:
        rows.append(at_once(f"{c} segments at once", [call], c, words, busy, out, f"c{c}"))
    if args.recognizer and args.both:
        build(args.both, args.tokenizer)
        aligner = Qwen3Aligner(str(args.both), memory=args.memory, batch=args.batch,
                               load_format="dummy")
        started = time.monotonic()
        aligner.start()
        out["both_load_s"] = time.monotonic() - started
        rows.append(["Qwen3-ForcedAligner beside it: load to ready",
                     f"{out['both_load_s']:.1f} s", "same process"])
        c = max(args.concurrency)
        rows.append(at_once(f"{c} segments aligned and heard at once",
                            [aligner.align, call], c, words, busy, out, "both"))
    busy.stop()
    print(table(["measure", "result", "note"], rows))
    save(args.label, {"args": {k: str(v) for k, v in vars(args).items()}} | out)


def shift(checkpoint: Path, memory: float, label: str, segments: int = 8) -> None:
    """Align the same segments with vLLM-Omni 0.26's prompt and with Narrator's: one table
    of how much later the first puts each word's start and end (ms; + is later)."""
    from vllm_omni.utils.qwen3_force_align_processor import build_prompt

    from workers.aligners.qwen3 import _Call, _Model

    model = _Model(str(checkpoint), {"gpu_memory_utilization": memory, "load_format": "auto",
                                     "max_model_len": 4096})
    calls = [_Call(segment(k), RATE, words_of(TEXT)) for k in range(segments)]
    theirs = model.align(calls, lambda words: build_prompt(list(words)))
    ours = model.align(calls)
    moves = [(a.start - b.start) * 1000 / RATE for x, y in zip(theirs, ours, strict=True)
             if x and y for a, b in zip(x, y, strict=True)]
    moves += [(a.end - b.end) * 1000 / RATE for x, y in zip(theirs, ours, strict=True)
              if x and y for a, b in zip(x, y, strict=True)]
    if not moves:
        print("no segment was aligned both ways")
        return
    rows = [["marks compared", str(len(moves)), f"{segments} segments, starts and ends"],
            ["mean shift", f"{statistics.mean(moves):+.0f} ms", "vLLM-Omni's prompt - Narrator's"],
            ["median shift", f"{statistics.median(moves):+.0f} ms", ""],
            ["later / earlier / same", " / ".join(str(n) for n in (
                sum(m > 0 for m in moves), sum(m < 0 for m in moves),
                sum(m == 0 for m in moves))), ""]]
    print(table(["measure", "result", "note"], rows))
    save(label + "_shift", {"checkpoint": str(checkpoint), "moves_ms": moves})


def at_once(label: str, calls: list[Any], count: int, words: int, busy: GpuBusy,
            out: dict[str, Any], key: str) -> list[str]:
    """COUNT segments through each of CALLS, all at once: one table row."""
    audio = [segment(100 + k) for k in range(count)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(count * len(calls)) as pool:
        found = list(pool.map(lambda job: job[0](job[1], RATE, TEXT),
                              [(c, a) for c in calls for a in audio]))
    wall = time.monotonic() - t0
    full = sum(f is not None and len(f) >= words for f in found)
    out[key] = {"wall_s": wall, "full": full, "gpu": busy.mean(t0, time.monotonic())}
    return [label, f"{count * SECONDS / wall:.0f} audio-s/s",
            f"{wall * 1000 / (count * SECONDS):.2f} ms per audio-s; {full}/{len(found)} with "
            f"at least the text's words; GPU {out[key]['gpu']}"]


if __name__ == "__main__":
    main()
