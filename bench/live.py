"""Listening while a book is made, as a user meets it: `narrator serve` (embedded defaults,
Piper) over HTTP.

    python -m bench.live [--segments 300] [--runs 3] [--watch 60] [--ws-seconds 180]

Each run submits an MP3 book of about `--segments` segments and polls its `stream_url`
every 0.1 s: the time from the submit to the first fragment that is listed and downloads
(a playable first fragment), beside the time to its first finished segment (what the engine
alone needs). Then, for `--watch` seconds, it checks that the stream stays ahead of a
listener who began at that first fragment: the audio listed minus the time since (the
smallest lead is reported; below zero, playback would have starved). The job is then
cancelled.

Then text streamed in (`WS /v1/audio/speech/stream`): a session sends a token (a word and
its space) every `--token-ms` (30) ms for `--ws-seconds`, as an LLM writes. For each
sentence it records the time from sending the token that ended it to its first audio byte,
and, from the first audio on, whether playback would have starved: the audio received minus
the time since the first byte (the smallest lead is reported). Writes
bench/results/live.json.

Leaves out: the console's players. On the GPU: bench.gpu_product --live (bench/gpu_live.py).
"""

import argparse
import json
import statistics
import threading
import time
from typing import Any

import httpx
import m3u8
from websockets.sync.client import connect

from bench.common import save, served, table
from bench.fairness import book


def _listed_seconds(http: httpx.Client, url: str) -> tuple[float, str | None]:
    """Seconds of audio the playlist lists now, and its first fragment's URL."""
    playlist = m3u8.loads(http.get(url).text, uri=url)
    first = playlist.segments[0].absolute_uri if playlist.segments else None
    return sum(s.duration or 0.0 for s in playlist.segments), first


def run(http: httpx.Client, segments: int, watch: float,
        fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """One book: submit, wait for its first playable fragment, watch the lead, cancel.
    `fields`: more of the job's fields (bench.gpu_product's voice and frames)."""
    start = time.monotonic()
    job = http.post("/v1/audio/jobs", json={"input": book(segments, "Live"),
                                            "response_format": "mp3"} | (fields or {})).json()
    first_segment = first_fragment = None
    while first_fragment is None:
        if first_segment is None and http.get(
                f"/v1/audio/jobs/{job['id']}").json()["segments"]["done"]:
            first_segment = time.monotonic() - start
        _, uri = _listed_seconds(http, job["stream_url"])
        if uri is not None and http.get(uri).status_code == 200:
            first_fragment = time.monotonic() - start
        time.sleep(0.1)
    began, lead = time.monotonic(), float("inf")
    while time.monotonic() - began < watch:
        listed, _ = _listed_seconds(http, job["stream_url"])
        lead = min(lead, listed - (time.monotonic() - began))
        time.sleep(0.5)
    status = http.get(f"/v1/audio/jobs/{job['id']}").json()
    http.post(f"/v1/audio/jobs/{job['id']}/cancel")
    return {"first_fragment_s": first_fragment, "first_segment_s": first_segment or
            first_fragment, "smallest_lead_s": lead, "segments_total": status["segments"]
            ["total"], "segments_done_at_end": status["segments"]["done"]}


def session(url: str, seconds: float, token_ms: float,
            fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """One WebSocket session fed a token every `token_ms` for `seconds` (see the docstring);
    `fields`: more of session.config's fields.

    Each sentence the server speaks is found in the text sent (its `text`, from where the
    last one ended), and its wait is from sending the token that held its last character to
    its first audio byte.
    """
    words = book(400, "Live").split(" ")
    sent: list[tuple[int, float]] = []  # (characters sent so far, when), one per token
    lock = threading.Lock()
    with connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream",
                 max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config"} | (fields or {})))
        text: list[str] = []

        def write() -> None:
            start, n, length = time.monotonic(), 0, 0
            while time.monotonic() - start < seconds:
                token = words[n % len(words)] + " "
                ws.send(json.dumps({"type": "text.delta", "text": token}))
                length += len(token)
                with lock:
                    text.append(token)
                    sent.append((length, time.monotonic()))
                n += 1
                time.sleep(token_ms / 1000)
            ws.send(json.dumps({"type": "session.close"}))

        writer = threading.Thread(target=write)
        writer.start()
        waits: list[float] = []
        received, began, lead, rate, cursor, ended_at = 0, 0.0, float("inf"), 0, 0, None
        for frame in ws:
            now = time.monotonic()
            if isinstance(frame, bytes):
                if ended_at is not None:  # the sentence's first audio
                    waits.append(now - ended_at)
                    ended_at = None
                began = began or now
                lead = min(lead, received / 2 / rate - (now - began)) if received else lead
                received += len(frame)
                continue
            event = json.loads(frame)
            if event["type"] == "sentence.start":
                rate = event["sample_rate"]
                with lock:
                    whole, marks = "".join(text), list(sent)
                at = whole.find(event["text"], cursor)
                if at >= 0:
                    cursor = at + len(event["text"])
                    ended_at = next(when for length, when in marks if length >= cursor)
            elif event["type"] == "done":
                done = event
        writer.join()
    return {"sentences": done["sentences"], "audio_seconds": done["audio_seconds"],
            "first_audio_after_sentence_ms": [round(w * 1000, 1) for w in waits],
            "smallest_lead_s": lead if lead != float("inf") else None}


def main() -> None:
    """Run the books and print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--watch", type=float, default=60.0)
    parser.add_argument("--ws-seconds", type=float, default=180.0)
    parser.add_argument("--token-ms", type=float, default=30.0)
    args = parser.parse_args()
    with served() as url, httpx.Client(base_url=url, timeout=60) as http:
        runs = [run(http, args.segments, args.watch) for _ in range(args.runs)]
        live = session(url, args.ws_seconds, args.token_ms)
    rows = [[n + 1, f"{r['first_segment_s']:.2f} s", f"{r['first_fragment_s']:.2f} s",
             f"{r['smallest_lead_s']:.1f} s", f"{r['segments_done_at_end']} of "
             f"{r['segments_total']}"] for n, r in enumerate(runs)]
    median = statistics.median(r["first_fragment_s"] for r in runs)
    print(table(["run", "first segment done", "first playable fragment",
                 f"smallest lead over {args.watch:.0f} s", "segments done"], rows))
    print(f"median submit -> playable first fragment: {median:.2f} s")
    waits = live["first_audio_after_sentence_ms"]
    print(table(["text streamed in", "result"], [
        ["session", f"{args.ws_seconds:.0f} s, a token every {args.token_ms:.0f} ms: "
                    f"{live['sentences']} sentences, {live['audio_seconds']:.1f} s of audio"],
        ["end of a sentence's text -> its first audio (p50 / p90 / max)",
         f"{statistics.median(waits):.0f} / {statistics.quantiles(waits, n=10)[-1]:.0f} / "
         f"{max(waits):.0f} ms" if len(waits) > 1 else "too few sentences"],
        ["first sentence", f"{waits[0]:.0f} ms" if waits else "none"],
        ["smallest lead of audio over playback", f"{live['smallest_lead_s']:.1f} s"
         if live["smallest_lead_s"] is not None else "no audio"]]))
    save("live", {"args": vars(args), "runs": runs, "median_first_fragment_s": median,
                  "text_in": live})


if __name__ == "__main__":
    main()
