"""Thread-safe sentence splitting: what each way of sharing pysbd costs.

pysbd's Segmenter keeps the text it splits on the instance, so one shared instance mixes
up threads. Three safe choices, timed over the same paragraphs from 1 and 8 threads:
a Segmenter per call (what core.text does), one per thread, and one shared behind a lock.
Each also checks that every thread got its own sentences back.

    python -m bench.segmenter [--paragraphs 3000]
"""

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import save, table

ROUNDS = 5


def _paragraph(n: int) -> str:
    return " ".join(f"Dr. Smith said sentence {n}.{s} was fine, e.g. in the U.S. on Jan. 5."
                    for s in range(6))


def main() -> None:
    """Time the three choices and print a table."""
    import pysbd

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--paragraphs", type=int, default=3000)
    args = parser.parse_args()

    shared, lock, local = pysbd.Segmenter(language="en", clean=False), threading.Lock(), \
        threading.local()

    def per_call(text: str) -> Any:
        return pysbd.Segmenter(language="en", clean=False).segment(text)

    def per_thread(text: str) -> Any:
        if not hasattr(local, "segmenter"):
            local.segmenter = pysbd.Segmenter(language="en", clean=False)
        return local.segmenter.segment(text)

    def locked(text: str) -> Any:
        with lock:
            return shared.segment(text)

    texts = [_paragraph(n) for n in range(args.paragraphs)]
    expected = [per_call(t) for t in texts[:200]]
    started = time.perf_counter()
    for _ in range(20_000):
        pysbd.Segmenter(language="en", clean=False)
    build_us = (time.perf_counter() - started) / 20_000 * 1e6

    choices: list[tuple[str, Callable[[str], Any]]] = [
        ("per call", per_call), ("per thread", per_thread), ("shared + lock", locked)]
    runs: list[dict[str, Any]] = []
    rows = []
    for threads in (1, 8):
        times: dict[str, list[float]] = {name: [] for name, _ in choices}
        correct = {name: True for name, _ in choices}
        for _ in range(ROUNDS):  # interleaved, so drift in the machine hits every choice
            for name, split in choices:
                with ThreadPoolExecutor(threads) as pool:
                    started = time.perf_counter()
                    got = list(pool.map(split, texts))
                    times[name].append((time.perf_counter() - started) / len(texts) * 1e6)
                correct[name] &= got[:200] == expected
        for name, _ in choices:
            us = statistics.median(times[name])
            rows.append([name, threads, f"{us:.0f}", f"{min(times[name]):.0f}–"
                         f"{max(times[name]):.0f}", "yes" if correct[name] else "NO"])
            runs.append({"choice": name, "threads": threads, "us_per_paragraph": us,
                         "rounds": times[name], "correct": correct[name]})
    print(f"Building one Segmenter: {build_us:.2f} µs\n")
    print(table(["choice", "threads", "µs per paragraph (median)", "range", "correct"], rows))
    save("segmenter", {"build_us": round(build_us, 2), "runs": runs})


if __name__ == "__main__":
    main()
