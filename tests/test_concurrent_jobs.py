"""Jobs submitted at the same moment to one worker on the threads pool (the GPU worker's).

Real API and worker processes on Postgres and Redis with Piper; the worker runs
`--pool threads`, so plans, segments and assemblies of different jobs share its threads.
"""

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from core.text import Gaps, plan_pieces
from tests.conftest import base_env, redis_url
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from tests.support import Stack, start_stack, wait_job
from workers.settings import WorkerSettings


@pytest.fixture(scope="module")
def threads_stack(tmp_path_factory: pytest.TempPathFactory,
                  database_url: str) -> Iterator[Stack]:
    """API plus one worker on the threads pool with 8 threads (Piper, default settings)."""
    redis.Redis.from_url(redis_url(10)).flushdb()
    tmp = tmp_path_factory.mktemp("threads-stack")
    stack = start_stack(tmp, base_env(tmp, database_url, 10),
                        worker_args=("--pool", "threads", "--concurrency", "8"))
    yield stack
    stack.stop()


def _book(n: int) -> str:
    """Three paragraphs of short sentences that each name their job."""
    return "\n\n".join(
        " ".join(f"Job {n} part {p} line {s} is here." for s in range(20)) for p in range(3))


def _planned(text: str) -> int:
    settings = WorkerSettings()
    gaps = Gaps(settings.sentence_gap_seconds, settings.paragraph_gap_seconds,
                settings.chapter_gap_seconds)
    return len(list(plan_pieces([text], settings.segment_chars, gaps)))


def _submit_together(url: str, texts: list[str]) -> list[dict[str, Any]]:
    barrier = threading.Barrier(len(texts))
    created: list[dict[str, Any]] = [{} for _ in texts]

    def submit(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            barrier.wait()
            response = http.post("/v1/audio/jobs", json={
                "input": texts[n], "response_format": "wav", "speed": 2.0,
                "subtitles": ["srt"]})
            assert response.status_code == 202, response.text
            created[n] = response.json()

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return created


def _cue_texts(srt: str) -> list[str]:
    blocks = [b.strip().split("\n", 2) for b in srt.strip().split("\n\n")]
    return [block[2].replace("\n", " ") for block in blocks]


@pytest.mark.parametrize("jobs", [2, 8])
def test_jobs_submitted_together_complete_whole_with_their_own_subtitles(
        threads_stack: Stack, jobs: int, tmp_path: Path) -> None:
    offset = 100 * jobs  # every round's texts are new
    texts = [_book(offset + n) for n in range(jobs)]
    created = _submit_together(threads_stack.url, texts)
    with threads_stack.client() as http:
        for n, job in enumerate(created):
            done = wait_job(http, job["id"], timeout=240)
            assert done["status"] == "completed", done
            assert done["segments"]["total"] == _planned(texts[n]), done["segments"]
            assert done["segments"]["done"] == done["segments"]["total"]
            srt = http.get(done["result"]["subtitles"]["srt"]).text
            cues = _cue_texts(srt)
            assert all(f"Job {offset + n} " in cue for cue in cues), cues
            assert " ".join(cues) == re.sub(r"\s+", " ", texts[n])
            manifest = http.get(done["result"]["manifest_url"]).json()
            assert len(manifest["segments"]) == done["segments"]["total"]
