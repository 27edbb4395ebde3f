"""MP3 and m4b books encoded in fragments on threads and joined: every sample in its place,
chapters included."""

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

from core.audio import decode
from models import Job, Segment
from models.db import session_scope
from storage import MediaStore
from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from tests.support import insert_job
from workers.book import assembly, fragments, parts

RATE = 24000


def _book(tmp: Path, seed: int, rate: int = RATE, fmt: str = "mp3"
          ) -> tuple[Job, list[Segment], MediaStore, list[int]]:
    """Parts of random length with one click each at a random place, random silences.

    Some silences are shorter than a fragment's overhead (no cut there) and some are zero.
    """
    rng = np.random.default_rng(seed)
    store = MediaStore(f"file://{tmp}")
    segments, clicks, chapter = [], [], 0
    for n in range(int(rng.integers(12, 30))):
        samples = int(rng.integers(rate // 2, 3 * rate))
        audio = np.zeros(samples, np.float32)
        click = int(rng.integers(rate // 10, samples - rate // 10))
        audio[click] = 0.9
        clicks.append(click)
        store.put(f"p/{n}.wav", parts.part_bytes(audio, rate))
        pause = float(rng.choice([0.0, 0.01, 0.03, 0.25, 0.6, 1.5]))
        segments.append(Segment(index=n, chapter=chapter, text="A sentence.", samples=samples,
                                pause_after=pause, attempts=1))
        chapter += int(rng.random() < 0.2)
    job = Job(id=uuid.uuid4(), model="m", voice="v", response_format=fmt, speed=1.0,
              options={"language": "en"}, input_characters=0,
              chapters=[{"title": f"C{c}", "input": ""} for c in range(chapter + 1)])
    return job, segments, store, clicks


def _manifest_starts(store: MediaStore, result: dict[str, object], rate: int) -> list[int]:
    with store.open(str(result["manifest_key"])) as f:
        return [round(s["start_seconds"] * rate) for s in json.load(f)["segments"]]


def _assemble(job: Job, segments: list[Segment], store: MediaStore,
              threads: int) -> dict[str, object]:
    return assembly.assemble(job, segments, store, store, lambda s: f"p/{s.index}.wav",
                             lufs=0.0, threads=threads)


def _length_ok(audio: np.ndarray, seconds: float, rate: int, fmt: str) -> bool:
    """Whether a decoded file is as long as it should be. An m4b's end is trimmed by its edit
    list, which players apply and FFmpeg's decoder (here) does not: its last AAC frame
    decodes whole, under 1,024 samples more (its start, also by the edit list, is exact)."""
    samples = round(seconds * rate)
    if fmt == "m4b":
        return samples <= len(audio) < samples + fragments.AAC_FRAME
    return len(audio) == samples


def _clicks_at(audio: np.ndarray, expected: list[int]) -> list[int]:
    """Return each click's distance from where it should be (the peak near it)."""
    out = []
    for at in expected:
        window = np.abs(audio[max(0, at - 400):at + 400])
        out.append(int(np.argmax(window)) + max(0, at - 400) - at)
    return out


@pytest.mark.parametrize(("seed", "fmt"), [(1, "mp3"), (2, "mp3"), (3, "mp3"), (1, "m4b"),
                                           (2, "m4b"), (3, "m4b")])
def test_a_fragmented_book_decodes_sample_exact(tmp_path: Path, seed: int, fmt: str) -> None:
    job, segments, store, clicks = _book(tmp_path, seed, fmt=fmt)
    result = _assemble(job, segments, store, threads=4)
    starts = _manifest_starts(store, result, RATE)
    with store.open(str(result["key"])) as f:
        audio, rate = decode(f.read())
    assert rate == RATE
    assert _length_ok(audio, float(result["duration_seconds"]), RATE, fmt)  # type: ignore[arg-type]
    offsets = _clicks_at(audio, [s + c for s, c in zip(starts, clicks, strict=True)])
    assert all(abs(d) <= 1 for d in offsets), offsets
    # Silence between segments decodes to silence: nothing leaks at the joins.
    for n, start in enumerate(starts[:-1]):
        end = start + (segments[n].samples or 0)
        gap = audio[end + 200:starts[n + 1] - 200]
        assert not len(gap) or float(np.max(np.abs(gap))) < 0.02


@pytest.mark.parametrize("fmt", ["mp3", "m4b"])
def test_chapter_files_hold_their_segments_without_the_closing_silence(tmp_path: Path,
                                                                       fmt: str) -> None:
    job, segments, store, clicks = _book(tmp_path, 4, fmt=fmt)
    assert len(job.chapters) > 1
    result = _assemble(job, segments, store, threads=3)
    chapters = result["chapters"]
    assert isinstance(chapters, list)
    first, starts = 0, _manifest_starts(store, result, RATE)
    for number, chapter in enumerate(chapters):
        with store.open(chapter["key"]) as f:
            audio, _ = decode(f.read())
        assert _length_ok(audio, chapter["duration_seconds"], RATE, fmt)
        mine = [n for n, s in enumerate(segments) if s.chapter == number]
        local = round(chapter["start_seconds"] * RATE)
        expected = [starts[n] - local + clicks[n] for n in mine]
        assert all(abs(d) <= 1 for d in _clicks_at(audio, expected))
        first += len(mine)
    assert first == len(segments)


@pytest.mark.parametrize("fmt", ["mp3", "m4b"])
def test_one_thread_and_many_give_the_same_book(tmp_path: Path, fmt: str) -> None:
    job, segments, store, _ = _book(tmp_path, 5, fmt=fmt)
    one = _assemble(job, segments, store, threads=1)
    with store.open(str(one["key"])) as f:
        single = f.read()
    many = _assemble(job, segments, store, threads=8)
    with store.open(str(many["key"])) as f:
        assert f.read() == single


def test_assemblies_on_threads_at_once_each_stay_exact(tmp_path: Path) -> None:
    books = [_book(tmp_path / str(n), 10 + n, fmt=("mp3", "m4b")[n % 2]) for n in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: _assemble(b[0], b[1], b[2], threads=2), books))
    for (job, _, store, _), result in zip(books, results, strict=True):
        with store.open(str(result["key"])) as f:
            audio, _ = decode(f.read())
        assert _length_ok(audio, float(result["duration_seconds"]), RATE,  # type: ignore[arg-type]
                          job.response_format)


@pytest.mark.parametrize("rate", [22050, 24000, 44100])
@pytest.mark.parametrize("fmt", ["mp3", "m4b"])
def test_overhead_is_whole_frames(rate: int, fmt: str) -> None:
    frame = fragments.frame_samples(rate, fmt)
    assert fragments.overhead(rate, fmt) > 0
    assert fragments.overhead(rate, fmt) % frame == 0


def test_a_22khz_book_is_exact_too(tmp_path: Path) -> None:
    job, segments, store, clicks = _book(tmp_path, 6, rate=22050)
    result = _assemble(job, segments, store, threads=2)
    with store.open(str(result["key"])) as f:
        audio, rate = decode(f.read())
    assert rate == 22050
    assert len(audio) == round(float(result["duration_seconds"]) * 22050)  # type: ignore[arg-type]
    starts = _manifest_starts(store, result, 22050)
    offsets = _clicks_at(audio, [s + c for s, c in zip(starts, clicks, strict=True)])
    assert all(abs(d) <= 1 for d in offsets), offsets


BOOK = ["First chapter. It has [pause:1s] two paragraphs.\n\nThe second one is short.",
        "Second chapter, one sentence. And a second sentence here."]


@pytest.fixture(params=["mp3", "m4b"])
def fragment_job(request: pytest.FixtureRequest, pipeline_env: None, db: Engine) -> uuid.UUID:
    """A queued two-chapter MP3 or m4b job, as the API stores it."""
    return uuid.UUID(str(insert_job(db, BOOK, request.param)))


def _count_encodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the first segment index of every group the assembly encodes itself."""
    calls: list[int] = []
    real = fragments.encode_group

    def counted(group: Any, *args: Any) -> fragments.Encoded:
        calls.append(group[0].index)
        return real(group, *args)

    monkeypatch.setattr(fragments, "encode_group", counted)
    return calls


def test_fragments_encoded_as_segments_finish_are_what_the_assembly_joins(
        fragment_job: uuid.UUID, monkeypatch: pytest.MonkeyPatch) -> None:
    from storage import store_for
    from tests.test_quality import Scripted
    from workers.book import progressive
    from workers.jobs import pipeline
    from workers.settings import get_settings

    monkeypatch.setenv("NARRATOR_SEGMENT_CHARS", "30")
    get_settings.cache_clear()
    _, ids = pipeline.plan(fragment_job)
    assert len(ids) >= 4
    encoded = []
    for n, segment_id in enumerate(ids):
        pipeline.synthesize(segment_id, engine=Scripted([1.0 + 0.1 * n]))
        ready = progressive.fragment_ready(segment_id)
        if n < len(ids) - 1:  # every segment ends a fragment with the default silences
            assert ready == (fragment_job, n)
        if ready is not None:
            assert progressive.encode_fragment(*ready)
            assert not progressive.encode_fragment(*ready)  # kept: not encoded twice
            encoded.append(ready[1])
    calls = _count_encodes(monkeypatch)
    assert pipeline.assemble(fragment_job).outcome == "completed"
    assert calls == []  # every fragment came from the ones kept
    with session_scope() as session:
        job = session.get(Job, fragment_job)
        assert job is not None
        result = job.result
    assert result is not None
    store = store_for()
    fmt = result["key"].rsplit(".", 1)[1]
    with store.open(result["key"]) as f:
        audio, rate = decode(f.read())
    assert _length_ok(audio, result["duration_seconds"], rate, fmt)
    for chapter in result["chapters"]:
        with store.open(chapter["key"]) as f:
            audio, _ = decode(f.read())
        assert _length_ok(audio, chapter["duration_seconds"], rate, fmt)


def _synthesize_ahead(job_id: uuid.UUID, seconds: float) -> None:
    """Synthesise every segment, encoding each fragment as its segments finish."""
    from tests.test_quality import Scripted
    from workers.book import progressive
    from workers.jobs import pipeline

    _, ids = pipeline.plan(job_id)
    for segment_id in ids:
        pipeline.synthesize(segment_id, engine=Scripted([seconds]))
        if (ready := progressive.fragment_ready(segment_id)) is not None:
            progressive.encode_fragment(*ready)


def test_a_fragment_of_a_segment_synthesised_again_is_not_reused(
        fragment_job: uuid.UUID, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.keys import part_key
    from storage import store_for
    from tests.test_quality import Scripted
    from workers.jobs import pipeline

    _synthesize_ahead(fragment_job, 1.0)
    store_for().delete(part_key(fragment_job, 0))  # lost: the assembly sends it back
    assembled = pipeline.assemble(fragment_job)
    assert assembled.outcome == "waiting"
    pipeline.synthesize(assembled.again[0], engine=Scripted([2.5]))
    calls = _count_encodes(monkeypatch)
    assert pipeline.assemble(fragment_job).outcome == "completed"
    assert calls == [0]  # only the new part's fragment is encoded again


def test_a_kept_fragment_cut_short_is_encoded_again(
        fragment_job: uuid.UUID, monkeypatch: pytest.MonkeyPatch) -> None:
    """As one still being written by a fragment task when the assembly reads it would be."""
    from storage import store_for
    from workers.jobs import pipeline

    _synthesize_ahead(fragment_job, 1.5)
    store = store_for()
    kept = sorted(p for p in store.fs.find(store.path(f"jobs/{fragment_job}/parts/fragments"))
                  if "-closing." not in p)
    data = store.fs.cat_file(kept[1])
    store.fs.pipe_file(kept[1], data[: len(data) // 2])
    calls = _count_encodes(monkeypatch)
    assert pipeline.assemble(fragment_job).outcome == "completed"
    assert calls == [1]
    with session_scope() as session:
        job = session.get(Job, fragment_job)
        assert job is not None
        assert job.result is not None
        result = job.result
    with store.open(result["key"]) as f:
        audio, rate = decode(f.read())
    assert _length_ok(audio, result["duration_seconds"], rate, result["key"].rsplit(".", 1)[1])
