"""A job's parts: written by the workers that speak them, read back and finished (loudness,
fades, mastering) for assembly, in order, on a pool of threads."""

import io
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import soundfile as sf

from core.audio import Audio, fade_edges, loudness_normalize
from models import Segment
from storage import MediaStore
from workers.book import mastering

T = TypeVar("T")
R = TypeVar("R")


def part_bytes(audio: Audio, rate: int) -> bytes:
    """Encode a part as 32-bit float WAV: lossless before the loudness change at assembly.

    Parts are working files, deleted once the job is assembled. They are written on the GPU
    worker, where FLAC would cost 8 times the CPU (8 ms against 1 ms per 20 s of speech), and
    every millisecond there holds up the engine's next batch.
    """
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


class PartLost(Exception):
    """A done segment's part is missing or not the audio recorded for it: synthesise again."""

    def __init__(self, segment: Segment, reason: str) -> None:
        super().__init__(f"segment {segment.index}: {reason}")
        self.segment = segment


def read_part(segment: Segment, store: MediaStore, part_key: Callable[[Segment], str]) -> Audio:
    """Read one part, checking that it is the audio recorded for its segment."""
    try:
        with store.open(part_key(segment)) as f:
            audio, _ = sf.read(f, dtype="float32")
    except FileNotFoundError:
        raise PartLost(segment, "its part is missing from storage") from None
    if not len(audio) or len(audio) != segment.samples:
        raise PartLost(segment, f"its part holds {len(audio)} samples, "
                                f"{segment.samples} were recorded")
    if not np.isfinite(audio).all():
        raise PartLost(segment, "its part holds samples that are not finite")
    return np.asarray(audio, dtype=np.float32)


def finish(segment: Segment, store: MediaStore, part_key: Callable[[Segment], str],
           lufs: float, rate: int, master: dict[int, float] | None = None) -> Audio:
    """Return one part, finished: normalised to `lufs` (0: as is), or for ACX (`master`,
    each chapter's RMS target) levelled by mastering.level; edges faded.

    Finishing happens here, on the worker that assembles, not on the GPU worker that
    synthesised the part: there, every millisecond of CPU delays the engine's next batch.
    """
    audio = read_part(segment, store, part_key)
    if master is not None:
        audio = mastering.level(audio, rate, master[segment.chapter])
    elif lufs:
        audio = loudness_normalize(audio, rate, lufs)
    return fade_edges(np.asarray(audio, dtype=np.float32), rate)


def ordered(fn: Callable[[T], R], items: Sequence[T], threads: int) -> Generator[R]:
    """Yield fn(item) for each item in order, up to 2 × `threads` computed ahead on threads."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="assemble") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # the consumer stopped or one failed: drop what has not started
            for future in pending:
                future.cancel()
