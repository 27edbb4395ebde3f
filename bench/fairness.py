"""Fair scheduling as a user meets it, through `narrator serve` (embedded defaults, Piper)
over HTTP.

    python -m bench.fairness [--book-segments 300] [--small-segments 3] [--delay 5]
    python -m bench.fairness --keys [--big-jobs 1000]

Book (the default): three phases on one server: the small job alone; the book alone; then
the book again with the small job submitted `--delay` seconds after it, by another API key.
Reports the small job's wall time against its time alone (target: within 3x plus one
segment's time) and the book's against its own (target: under 5 % slower). Writes
bench/results/fairness.json.

Keys (`--keys`): one key submits `--big-jobs` one-segment jobs in batches, then nine other
keys submit one job each. Reports, for each of the nine, how many of the big key's jobs had
completed when it completed (target: fewer than 20). Writes bench/results/fairness_keys.json.
"""

import argparse
import time
from typing import Any

import httpx

from bench.common import save, served, table

KEYS = ("alice-bench-key", "bob-bench-key")
# About 340 characters: one paragraph is one segment (SEGMENT_CHARS packs sentences to ~400).
PARAGRAPH = ("The harbour lay quiet under a grey sky, and the boats rocked gently at their "
             "moorings. Gulls circled over the market square, where the first stalls were "
             "opening for the day. A bell rang somewhere beyond the church. The fishermen "
             "counted their nets, spoke of the weather and the price of cod, and watched the "
             "tide turn slowly toward the afternoon.")


def book(paragraphs: int, title: str) -> str:
    """A text that plans into about `paragraphs` segments."""
    return "\n\n".join(f"{title}, part {n + 1}. {PARAGRAPH}" for n in range(paragraphs))


def submit(http: httpx.Client, key: str, text: str) -> str:
    answer = http.post("/v1/audio/jobs", json={"input": text, "response_format": "wav"},
                       headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    return str(answer.json()["id"])


def wait(http: httpx.Client, key: str, job: str) -> dict[str, Any]:
    while True:
        found = http.get(f"/v1/audio/jobs/{job}",
                         headers={"Authorization": f"Bearer {key}"}).json()
        if found["status"] in ("completed", "failed", "cancelled"):
            return dict(found)
        time.sleep(0.2)


def timed(http: httpx.Client, key: str, text: str, delay: float = 0.0) -> tuple[float, int]:
    """Submit after `delay` seconds; return (seconds from submit to done, segments)."""
    time.sleep(delay)
    started = time.monotonic()
    job = wait(http, key, submit(http, key, text))
    assert job["status"] == "completed", job
    return time.monotonic() - started, int(job["segments"]["total"])


def completed(http: httpx.Client, key: str, most: int = 100) -> int:
    """How many of `key`'s jobs have completed (counted up to `most`)."""
    found = http.get("/v1/audio/jobs", params={"status": "completed", "limit": most},
                     headers={"Authorization": f"Bearer {key}"}).json()
    return len(found["data"])


def keys_run(big_jobs: int) -> None:
    """One key's `big_jobs` jobs queued, then one job each of nine other keys."""
    keys = [f"key-{n}-bench" for n in range(10)]
    note = {"input": PARAGRAPH, "response_format": "wav"}
    with served({"NARRATOR_API_KEYS": ",".join(keys)}) as url, \
            httpx.Client(base_url=url, timeout=120) as http:
        timed(http, keys[1], PARAGRAPH)  # warm-up
        started = time.monotonic()
        for start in range(0, big_jobs, 250):
            http.post("/v1/audio/jobs/batch", json=[note] * min(250, big_jobs - start),
                      headers={"Authorization": f"Bearer {keys[0]}"}).raise_for_status()
        queued_s = time.monotonic() - started
        small = {key: submit(http, key, PARAGRAPH) for key in keys[1:]}
        submitted = time.monotonic()
        ahead: dict[str, tuple[int, float]] = {}  # key: (big key's done by then, seconds)
        while len(ahead) < len(small):
            for key, job in small.items():
                status = http.get(f"/v1/audio/jobs/{job}",
                                  headers={"Authorization": f"Bearer {key}"}).json()["status"]
                if key not in ahead and status == "completed":
                    ahead[key] = (completed(http, keys[0]), time.monotonic() - submitted)
            time.sleep(0.2)
    rows = [[key, f"{ahead[key][1]:.1f} s", str(ahead[key][0])] for key in small]
    print(table(["key (one job)", "done after", "big key's jobs done by then (target < 20)"],
                rows))
    print(f"{big_jobs} jobs of the big key queued in {queued_s:.1f} s (batches of 250)")
    save("fairness_keys", {"big_jobs": big_jobs, "queued_s": queued_s,
                           "small": [{"done_s": s, "big_done": n} for n, s in ahead.values()]})


def main() -> None:
    """Run the chosen scenario and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--book-segments", type=int, default=300)
    parser.add_argument("--small-segments", type=int, default=3)
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--keys", action="store_true", help="the ten-keys scenario")
    parser.add_argument("--big-jobs", type=int, default=1000)
    args = parser.parse_args()
    if args.keys:
        keys_run(args.big_jobs)
        return
    big, small = book(args.book_segments, "Book"), book(args.small_segments, "Note")
    from concurrent.futures import ThreadPoolExecutor

    with served({"NARRATOR_API_KEYS": ",".join(KEYS)}) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        timed(http, KEYS[1], small)  # warm-up
        small_alone, small_n = timed(http, KEYS[1], small)
        book_alone, book_n = timed(http, KEYS[0], big)
        with ThreadPoolExecutor(2) as pool:
            book_run = pool.submit(timed, http, KEYS[0], big)
            small_run = pool.submit(timed, http, KEYS[1], small, args.delay)
            book_shared, small_shared = book_run.result()[0], small_run.result()[0]
    segment = book_alone / book_n
    rows = [
        [f"small job ({small_n} segments), alone", f"{small_alone:.1f} s", ""],
        [f"small job, {args.delay:.0f} s into the book, another key",
         f"{small_shared:.1f} s", f"{small_shared / small_alone:.2f}x alone (target: within "
         f"3x + one segment, {3 * small_alone + segment:.1f} s)"],
        [f"book ({book_n} segments), alone", f"{book_alone:.1f} s", ""],
        ["book, with the small job", f"{book_shared:.1f} s",
         f"{book_shared / book_alone:.3f}x alone (target: < 1.05)"],
    ]
    print(table(["run", "wall time", "against alone"], rows))
    save("fairness", {"book_segments": book_n, "small_segments": small_n, "delay": args.delay,
                      "small_alone_s": small_alone, "small_shared_s": small_shared,
                      "book_alone_s": book_alone, "book_shared_s": book_shared,
                      "segment_s": segment})


if __name__ == "__main__":
    main()
