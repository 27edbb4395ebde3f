"""Listening while a book is made, as a user meets it: `narrator serve` (embedded defaults,
Piper) over HTTP.

    python -m bench.live [--segments 300] [--runs 3] [--watch 60]

Each run submits an MP3 book of about `--segments` segments and polls its `stream_url`
every 0.1 s: the time from the submit to the first fragment that is listed and downloads
(a playable first fragment), beside the time to its first finished segment (what the engine
alone needs). Then, for `--watch` seconds, it checks that the stream stays ahead of a
listener who began at that first fragment: the audio listed minus the time since (the
smallest lead is reported; below zero, playback would have starved). The job is then
cancelled. Writes bench/results/live.json.

Leaves out: the console's player, and text streamed in (not built yet).
"""

import argparse
import statistics
import time
from typing import Any

import httpx
import m3u8

from bench.common import save, served, table
from bench.fairness import book


def _listed_seconds(http: httpx.Client, url: str) -> tuple[float, str | None]:
    """Seconds of audio the playlist lists now, and its first fragment's URL."""
    playlist = m3u8.loads(http.get(url).text, uri=url)
    first = playlist.segments[0].absolute_uri if playlist.segments else None
    return sum(s.duration or 0.0 for s in playlist.segments), first


def run(http: httpx.Client, segments: int, watch: float) -> dict[str, Any]:
    """One book: submit, wait for its first playable fragment, watch the lead, cancel."""
    start = time.monotonic()
    job = http.post("/v1/audio/jobs", json={"input": book(segments, "Live"),
                                            "response_format": "mp3"}).json()
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


def main() -> None:
    """Run the books and print one table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--watch", type=float, default=60.0)
    args = parser.parse_args()
    with served() as url, httpx.Client(base_url=url, timeout=60) as http:
        runs = [run(http, args.segments, args.watch) for _ in range(args.runs)]
    rows = [[n + 1, f"{r['first_segment_s']:.2f} s", f"{r['first_fragment_s']:.2f} s",
             f"{r['smallest_lead_s']:.1f} s", f"{r['segments_done_at_end']} of "
             f"{r['segments_total']}"] for n, r in enumerate(runs)]
    median = statistics.median(r["first_fragment_s"] for r in runs)
    print(table(["run", "first segment done", "first playable fragment",
                 f"smallest lead over {args.watch:.0f} s", "segments done"], rows))
    print(f"median submit -> playable first fragment: {median:.2f} s")
    save("live", {"args": vars(args), "runs": runs, "median_first_fragment_s": median})


if __name__ == "__main__":
    main()
