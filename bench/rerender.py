"""Re-rendering one chapter of a book against making the whole book, through the platform.

A 4-chapter book (bench.longform's text, MP3 with SRT) through `narrator serve` (embedded,
Piper), submit to `completed`; then POST .../rerender of one chapter with a lexicon, to the
next version's `completed`; then the same chapter with new text (planned again, the later
chapters' parts moved). For each: wall seconds, the segments the engine ran (the sum of the
manifest's attempts, before and after) and the version's length. What the reuse saves is the
whole book's time against one chapter's; the assembly still reads every part and writes the
whole book (and every chapter file) again.

    python -m bench.rerender [--chars 20000] [--chapter 1]
"""

import argparse
import time
from typing import Any

import httpx

from bench.common import save, served, table
from bench.longform import book


def _wait(http: httpx.Client, job_id: str) -> dict[str, Any]:
    while True:
        job: dict[str, Any] = http.get(f"/v1/audio/jobs/{job_id}").json()
        if job["status"] in ("completed", "failed"):
            if job["status"] != "completed":
                raise RuntimeError(str(job["error"]))
            return job
        time.sleep(0.2)


def _runs(http: httpx.Client) -> int:
    """Segments the engine has synthesised so far (the workers' Prometheus counter)."""
    text = http.get("/metrics").text
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith("narrator_segments_synthesized_total")))


def main() -> None:
    """Run the three steps and print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--chapter", type=int, default=1)
    args = parser.parse_args()
    chapters = book(args.chars)
    rows, results = [], {}
    with served() as url, httpx.Client(base_url=url, timeout=60) as http:
        _wait(http, http.post("/v1/audio/jobs", json={"input": "Warm up."}).json()["id"])
        runs = _runs(http)
        http.post("/v1/audio/lexicons", json={"name": "bench", "entries": [
            {"text": "lighthouse", "alias": "light house"}]})
        steps = [("whole book", None),
                 (f"re-render chapter {args.chapter + 1} with a lexicon",
                  {"chapters": [args.chapter], "lexicons": ["bench"]}),
                 (f"chapter {args.chapter + 1} with new text (planned again)",
                  {"inputs": {str(args.chapter): chapters[args.chapter]["input"]
                              + "\n\nA last paragraph, added on the second reading."}})]
        job: dict[str, Any] = {}
        for label, body in steps:
            start = time.perf_counter()
            if body is None:
                job = http.post("/v1/audio/jobs", json={"chapters": chapters,
                                                        "subtitles": ["srt"]}).json()
            else:
                response = http.post(f"/v1/audio/jobs/{job['id']}/rerender", json=body)
                response.raise_for_status()
            job = _wait(http, job["id"])
            wall = time.perf_counter() - start
            total = _runs(http)
            rows.append([label, job["version"], job["segments"]["total"], total - runs,
                         f"{job['result']['duration_seconds']:.1f}", f"{wall:.1f}"])
            results[label] = {"version": job["version"], "segments": job["segments"]["total"],
                              "engine_runs": total - runs, "wall_s": wall}
            runs = total
    print(f"{sum(len(c['input']) for c in chapters)} characters in {len(chapters)} chapters, "
          "MP3 + SRT, Piper, narrator serve")
    print(table(["step", "version", "segments", "engine runs", "audio s", "wall s"], rows))
    save("rerender", results)


if __name__ == "__main__":
    main()
