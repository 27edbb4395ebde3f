"""Fair scheduling as a user meets it: a small job of one key submitted while another key's
book is being made, through `narrator serve` (embedded defaults, Piper) over HTTP.

    python -m bench.fairness [--book-segments 300] [--small-segments 3] [--delay 5]

Three phases on one server: the small job alone; the book alone; then the book again with
the small job submitted `--delay` seconds after it, by another API key. Reports the small
job's wall time against its time alone (target: within 3x plus one segment's time) and the
book's against its own (target: under 5 % slower). Writes bench/results/fairness.json.
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


def main() -> None:
    """Run the three phases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--book-segments", type=int, default=300)
    parser.add_argument("--small-segments", type=int, default=3)
    parser.add_argument("--delay", type=float, default=5.0)
    args = parser.parse_args()
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
