"""The job object the API returns, rendered from a row; URLs are made fresh at read time."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from core import ids
from models import Job, JobStatus, utcnow

# (storage key, API content URL for local files) -> URL
UrlFor = Callable[[str, str], str]


# What each field of the job object holds: the API reference's "job object" table is written
# from these (narrator/api_reference.py), and tests/test_api_reference.py fails when a field
# the renderer writes is not described here.
JOB_FIELDS: dict[str, str] = {
    "id": "`job_` and 32 hex digits.",
    "object": "Always `audio.job`.",
    "status": "`queued`, `in_progress`, `completed`, `failed` or `cancelled`.",
    "progress": "Per cent of the segments done, 0 to 99 until the job completes, then 100.",
    "model": "The model that speaks it.",
    "priority": "Its priority among the key's jobs (`normal` unless the submit set one).",
    "voice": "The job's voice (chapters and `cast` may name others).",
    "response_format": "The audio format of its files.",
    "created_at": "When it was submitted, Unix seconds.",
    "started_at": "When it was planned and went in progress, Unix seconds; null before.",
    "completed_at": "When it ended (completed, failed or cancelled), Unix seconds; null before.",
    "expires_at": "When its media and the job will be deleted (RESULT_TTL_HOURS); null: kept.",
    "segments": "`{\"total\", \"done\", \"failed\"}`: its segments by state.",
    "usage": "`{\"input_characters\", \"audio_seconds\"}`: text taken and audio made.",
    "eta_seconds": "Seconds left at the rate so far; null until its first segment is done.",
    "queue": "While in progress, on `GET /v1/audio/jobs/{id}` only: `{\"waiting\", "
             "\"in_flight\"}`, its segments waiting for a worker and being spoken.",
    "result": "When completed, its files (the table below); null before.",
    "stream_url": "An MP3 or m4b book's HLS playlist, from its submit on (not ACX-mastered "
                  "books): what is done so far, growing until it ends; null for other jobs.",
    "error": "When failed, `{\"code\", \"message\"}` (the codes are under Error codes).",
    "metadata": "Your `metadata`, as sent.",
    "version": "1, and one more for each re-render.",
    "versions": "The earlier versions a re-render left, oldest first: `version`, "
                "`completed_at` and the same fields as `result`.",
    "book": "The book's tags as sent (only when the submit gave them).",
    "lexicons": "The ids of the lexicons it was spoken with (only when it named some).",
}
RESULT_FIELDS: dict[str, str] = {
    "url": "The whole book's audio.",
    "duration_seconds": "Its length.",
    "bytes": "Its size.",
    "sample_rate": "Its sample rate.",
    "chapters": "Per chapter: `title`, `start_seconds`, `duration_seconds` and `url` (its own "
                "file, or null when the book is one file).",
    "subtitles": "The subtitle files asked for, by kind: `srt`, `vtt`, `words`.",
    "manifest_url": "The manifest: every segment's text, voice, timing and checks.",
    "verification": "With `verify`: what was heard back and which segments were flagged.",
    "mastering": "With `mastering`: `{\"profile\", \"ok\"}`.",
}


def streamable(job: Job) -> bool:
    """Whether a job's book is joined from fragments, so that it can be listened to while it
    is made (api/routes/listen.py): MP3 and m4b, not ACX-mastered (encoded whole)."""
    return job.response_format in ("mp3", "m4b") \
        and (job.options or {}).get("mastering") != "acx"


def public_id(job: Job) -> str:
    """Return the public id, `job_<32 hex>`."""
    return ids.job_id(job.id)


def _ts(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value else None


def _eta(job: Job) -> float | None:
    if job.status != JobStatus.in_progress or not job.segments_done or not job.started_at:
        return None
    elapsed = (utcnow() - job.started_at).total_seconds()
    remaining = job.segments_total - job.segments_done
    return round(elapsed / job.segments_done * remaining, 1)


def _progress(job: Job) -> int:
    if job.status == JobStatus.completed:
        return 100
    if not job.segments_total:
        return 0
    return min(99, int(100 * job.segments_done / job.segments_total))


def _result(job: Job, url_for: UrlFor, content: str) -> dict[str, Any] | None:
    stored = job.result
    if job.status != JobStatus.completed or not stored:
        return None
    return _files(stored, url_for, content)


def _versions(job: Job, url_for: UrlFor, content: str) -> list[dict[str, Any]]:
    """The earlier versions a re-render left, oldest first, with their files' URLs."""
    out = []
    for number, kept in sorted((job.versions or {}).items(), key=lambda kv: int(kv[0])):
        at = datetime.fromisoformat(kept["completed_at"]) if kept.get("completed_at") else None
        out.append({"version": int(number), "completed_at": _ts(at)}
                   | _files(kept["result"], url_for, content, f"version={number}"))
    return out


def _files(stored: dict[str, Any], url_for: UrlFor, content: str,
           query: str = "") -> dict[str, Any]:
    """A result's files: keys made URLs (`query`: how the API's content URL names them)."""
    def local(variant: str = "") -> str:
        both = "&".join(q for q in (query, variant) if q)
        return f"{content}?{both}" if both else content

    chapters = [
        {"title": c["title"], "start_seconds": c["start_seconds"],
         "duration_seconds": c["duration_seconds"],
         "url": url_for(c["key"], local(f"variant=chapter&index={n}")) if "key" in c else None}
        for n, c in enumerate(stored.get("chapters", []))
    ]
    return {
        "url": url_for(stored["key"], local()),
        "duration_seconds": stored["duration_seconds"],
        "bytes": stored["bytes"],
        "sample_rate": stored.get("sample_rate"),
        "chapters": chapters,
        "subtitles": {kind: url_for(key, local(f"variant=subtitles_{kind}"))
                      for kind, key in stored.get("subtitles", {}).items()},
        "manifest_url": url_for(stored["manifest_key"], local("variant=manifest")),
    } | {k: stored[k] for k in ("verification", "mastering") if k in stored}


def job_object(job: Job, url_for: UrlFor, api_base: str,
               queue: tuple[int, int] | None = None) -> dict[str, Any]:
    """Render the job object; `queue`: its segments waiting for dispatch and in flight
    (`GET /v1/audio/jobs/{id}` reads them; shown while the job is in progress)."""
    pid = public_id(job)
    content = f"{api_base}/v1/audio/jobs/{pid}/content"
    return {
        "id": pid,
        "object": "audio.job",
        "status": job.status.value,
        "progress": _progress(job),
        "model": job.model,
        "priority": job.priority or "normal",
        "voice": job.voice,
        "response_format": job.response_format,
        "created_at": _ts(job.created_at),
        "started_at": _ts(job.started_at),
        "completed_at": _ts(job.completed_at),
        "expires_at": _ts(job.expires_at),
        "segments": {"total": job.segments_total, "done": job.segments_done,
                     "failed": job.segments_failed},
        "usage": {"input_characters": job.input_characters,
                  "audio_seconds": round(job.audio_seconds, 3)},
        "eta_seconds": _eta(job),
        "queue": {"waiting": queue[0], "in_flight": queue[1]}
        if queue is not None and job.status == JobStatus.in_progress else None,
        "result": _result(job, url_for, content),
        "stream_url": f"{api_base}/v1/audio/jobs/{pid}/stream.m3u8" if streamable(job) else None,
        "error": job.error,
        "metadata": job.meta,
        "version": job.version or 1,
        "versions": _versions(job, url_for, content),
    } | {k: job.options[k] for k in ("book", "lexicons") if job.options.get(k)}
