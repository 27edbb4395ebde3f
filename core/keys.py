"""Where a job's media lives: storage keys, and the store that holds them."""

import uuid

from storage import MediaStore, store_for


def job_prefix(job_id: uuid.UUID) -> str:
    """Return the prefix of everything a job stores."""
    return f"jobs/{job_id}"


def version_prefix(job_id: uuid.UUID, version: int) -> str:
    """Return where a version of a job's result lives: the first at the job's prefix, each
    re-render's under `v<n>/`, so that earlier versions stay downloadable."""
    return job_prefix(job_id) if version <= 1 else f"{job_prefix(job_id)}/v{version}"


def cover_key(job_id: uuid.UUID, extension: str) -> str:
    """Return where a job's cover image is kept (deleted with the job)."""
    return f"{job_prefix(job_id)}/cover.{extension}"


def parts_prefix(job_id: uuid.UUID) -> str:
    """Return the prefix of a job's parts (kept for re-renders unless KEEP_PARTS=false)."""
    return f"{job_prefix(job_id)}/parts"


def part_key(job_id: uuid.UUID, index: int) -> str:
    """Return the storage key of one segment's part (32-bit float WAV)."""
    return f"{parts_prefix(job_id)}/{index:06d}.wav"


def take_key(job_id: uuid.UUID, index: int, take: int) -> str:
    """Return where an earlier take of a segment's part is kept (`verify: "retry"`)."""
    return f"{parts_prefix(job_id)}/{index:06d}.take{take}.wav"


def words_key(job_id: uuid.UUID, index: int, attempts: int, samples: int | None) -> str:
    """Return where segment `index`'s word times are kept: for the attempt and length of its
    part that they were measured on only."""
    return f"{parts_prefix(job_id)}/{index:06d}-{attempts}-{samples}.words.json"


def heard_key(job_id: uuid.UUID, index: int, attempts: int, samples: int | None) -> str:
    """Return where what the recogniser heard in that part is kept (as words_key)."""
    return f"{parts_prefix(job_id)}/{index:06d}-{attempts}-{samples}.heard.json"


def fragment_key(job_id: uuid.UUID, first_index: int, digest: str, fmt: str) -> str:
    """Return where an encoded fragment (a group of parts, MP3 or AAC for m4b) is kept,
    named for its first segment and a digest of everything it depends on."""
    return f"{parts_prefix(job_id)}/fragments/{first_index:06d}-{digest}." \
        f"{'aac' if fmt == 'm4b' else 'mp3'}"


def audio_key(base: str, extension: str) -> str:
    """Return the key of a version's audio file (`base`: version_prefix)."""
    return f"{base}/audio.{extension}"


def chapter_key(base: str, number: int, extension: str) -> str:
    """Return the key of one chapter's file of a version split into chapters."""
    return f"{base}/chapters/{number:03d}.{extension}"


def subtitles_key(base: str, kind: str) -> str:
    """Return the key of a version's subtitles: `srt`, `vtt` or `words` (a JSON word track)."""
    return f"{base}/subtitles.words.json" if kind == "words" else f"{base}/subtitles.{kind}"


def manifest_key(base: str) -> str:
    """Return the key of a version's manifest."""
    return f"{base}/manifest.json"


def consent_key(consent_id: uuid.UUID) -> str:
    """Return the storage key of a voice consent's recording."""
    return f"consents/{consent_id}/recording.flac"


def voice_key(voice_id: uuid.UUID) -> str:
    """Return the storage key of an uploaded voice's reference clip."""
    return f"voices/{voice_id}/reference.flac"


def result_store(output_url: str | None) -> MediaStore:
    """Return the store a job's results go to: its `output_url`, else the platform's."""
    return store_for(output_url) if output_url else store_for()
