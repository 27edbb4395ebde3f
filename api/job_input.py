"""Turn a job request into its chapters and options: JSON, Markdown or an EPUB upload."""

import base64
import binascii
import hashlib
import io
import posixpath
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from api.errors import ApiError, bad_request
from api.schemas import Chapter, JobBody
from api.validation import check_script, find_voice, text_field
from core import outbound
from core.catalog import ModelInfo, VoiceInfo
from core.epub import BadEpub
from core.epub import chapters as epub_chapters
from core.markdown import chapters as markdown_chapters
from core.text import MAX_MARKED_SILENCE_SECONDS, MAX_PAUSE_SECONDS, PAUSE, speakers


def chapters(body: JobBody, limit: int, max_chapters: int) -> list[dict[str, Any]]:
    """Return the job's chapters as cleaned text, checked against the limits."""
    if body.input is None and body.chapters is None:
        raise bad_request("input: this field is required (or give 'chapters')", "input",
                          "invalid_value")
    if body.input is not None and body.chapters is not None:
        raise bad_request("input: give either 'input' or 'chapters', not both", "input",
                          "invalid_value")
    if body.input is not None and body.input_format == "markdown":
        parsed = markdown_chapters(body.input)
        if not parsed:
            raise bad_request("input: the Markdown has nothing to speak", "input", "empty_input")
        body = body.model_copy(update={"input": None, "chapters": [
            Chapter(title=c["title"], input=c["input"]) for c in parsed]})
    elif body.input is not None:
        return [{"title": None, "input": text_field(body.input, "input", limit)}]
    elif body.input_format == "markdown":  # chapters given: strip each one's markup
        plain = [Chapter(title=c.title, input="\n\n".join(
            part["input"] for part in markdown_chapters(c.input))) for c in body.chapters or []]
        body = body.model_copy(update={"chapters": plain})
    assert body.chapters is not None
    if not body.chapters:
        raise bad_request("chapters: must not be empty", "chapters", "empty_input")
    if len(body.chapters) > max_chapters:
        raise bad_request(f"chapters: {len(body.chapters)} is over the limit of {max_chapters}",
                          "chapters", "too_many_chapters")
    chapters: list[dict[str, Any]] = [
        {"title": c.title, "input": text_field(c.input, f"chapters.{n}.input", limit)}
        | ({"voice": c.voice} if c.voice else {}) for n, c in enumerate(body.chapters)
    ]
    total = sum(len(c["input"]) for c in chapters)
    if total > limit:
        raise bad_request(f"chapters: {total} characters in all is over the limit of {limit}",
                          "chapters", "input_too_long")
    return chapters


INLINE_CHARS = 20_000  # bodies with more text than this are read in a worker thread


def body_chars(body: JobBody) -> int:
    """Return how many characters of text a job body carries."""
    return len(body.input or "") + sum(len(c.input) for c in body.chapters or ())


def text_of(body: JobBody, model: ModelInfo, own: list[VoiceInfo], limit: int,
            max_chapters: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Return a job body's chapters and voices (`chapters`, `cast`), with its marked silence
    checked: what costs CPU in proportion to the text, for a worker thread when long."""
    found = chapters(body, limit, max_chapters)
    check_silence(found)
    for chapter in found:
        check_script(model, chapter["input"], body.language)
    return found, cast(body, found, model, own)


def check_silence(chapters: list[dict[str, Any]]) -> None:
    """A 400 if the chapters' `[pause:Ns]` marks ask for more silence than a job may have."""
    asked = sum(min(float(m.group(1)), MAX_PAUSE_SECONDS)
                for c in chapters for m in PAUSE.finditer(c["input"]))
    if asked > MAX_MARKED_SILENCE_SECONDS:
        raise bad_request(f"input: its [pause:Ns] marks ask for {asked:.0f} s of silence; a "
                          f"job may have at most {MAX_MARKED_SILENCE_SECONDS:.0f} s "
                          f"(and {MAX_PAUSE_SECONDS:.0f} s in one place)", "input",
                          "too_much_silence")


def cast(body: JobBody, chapters: list[dict[str, Any]], model: ModelInfo,
         own: list[VoiceInfo]) -> dict[str, Any]:
    """Return the job's `cast` and `chapter_voices` options (core.cast), every voice checked
    against the model: a 400 names an unknown voice, or a `[voice:name]` mark's speaker that
    is neither in the cast nor a voice of the model."""
    def voice(name: str, param: str) -> str:
        found = find_voice(model, own, name)
        if found is None:
            listed = ", ".join(v.id for v in (*model.voices, *own))
            raise bad_request(f"{param}: unknown voice '{name}' for model '{model.id}'; "
                              f"available: {listed}", param, "voice_not_found")
        return found.id

    given = {name.strip().lower(): {"name": name.strip(), "voice": voice(v, f"cast.{name}")}
             for name, v in body.cast.items()}
    chapter_voices = {str(n): voice(c["voice"], f"chapters.{n}.voice")
                      for n, c in enumerate(chapters) if c.get("voice")}
    for key, name in body.chapter_voices.items():
        if int(key) >= len(chapters):
            raise bad_request(f"chapter_voices.{key}: the job has {len(chapters)} chapter(s), "
                              "numbered from 0", f"chapter_voices.{key}", "invalid_value")
        chapter_voices[str(int(key))] = voice(name, f"chapter_voices.{key}")
    for n, chapter in enumerate(chapters):
        for speaker in speakers(chapter["input"]):
            if speaker in given:
                continue
            found = find_voice(model, own, speaker)
            if found is None:
                param = f"chapters.{n}.input" if body.chapters or len(chapters) > 1 else "input"
                raise bad_request(
                    f"{param}: [voice:{speaker}] names no one in the cast "
                    f"({', '.join(given) or 'empty'}) and no voice of model '{model.id}'",
                    param, "unknown_speaker")
            given[speaker] = {"name": speaker, "voice": found.id}
    return ({"cast": given} if given else {}) | (
        {"chapter_voices": chapter_voices} if chapter_voices else {})


def check_output_url(url: str | None, allowed: list[str]) -> str | None:
    """Return the normalised output URL if it lies under an allowed prefix, else a 400."""
    if url is None:
        return None
    scheme, sep, path = url.partition("://")
    if scheme != "s3" or not sep or not path.strip("/"):
        raise bad_request("output_url: must be s3://bucket/prefix", "output_url",
                          "invalid_value")
    normal = f"s3://{posixpath.normpath('/' + path).lstrip('/')}"
    if not allowed:
        raise bad_request("output_url: delivery to an external location is not enabled on "
                          "this server (NARRATOR_OUTPUT_URL_PREFIXES)", "output_url",
                          "unsupported_parameter")
    if not any((normal + "/").startswith(prefix) for prefix in allowed):
        raise bad_request(f"output_url: not under an allowed prefix ({', '.join(allowed)})",
                          "output_url", "output_url_not_allowed")
    return normal


async def check_webhook_url(url: str | None, allow: str) -> None:
    """A 400 unless the webhook URL is http(s) to public addresses (core.outbound)."""
    if url is None:
        return
    try:
        await anyio.to_thread.run_sync(outbound.check, url, allow)  # DNS: off the loop
    except outbound.RefusedURL as exc:
        raise bad_request(f"webhook_url: {exc}", "webhook_url", "webhook_url_refused") from exc


MULTIPART = {
    "type": "object",
    "properties": {"file": {"type": "string", "format": "binary",
                            "description": "an EPUB; chapters come from its spine and TOC"},
                   "cover": {"type": "string", "format": "binary",
                             "description": "a JPEG or PNG cover for the audiobook's files"},
                   "request": {"type": "string",
                               "description": "the JSON job fields (input or chapters, "
                                              "unless an EPUB is given)"}}}
MAX_COVER_BYTES = 5 * 1024 * 1024
MAX_COVER_SIDE = 5000


@dataclass
class JobRequest:
    """A parsed job request: its fields, a digest of what was uploaded, and its cover."""

    body: JobBody
    upload_digest: bytes = b""
    cover: bytes | None = None


async def job_body(request: Request, max_bytes: int) -> JobRequest:
    """Parse a JSON body, or a multipart one: a `request` JSON field with an EPUB `file`
    and/or a `cover` image."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        body = _validated(await request.body())
        cover = _base64_cover(body.cover) if body.cover is not None else None
        return JobRequest(body.model_copy(update={"cover": None}), b"", cover)
    form = await request.form(max_files=2, max_fields=20, max_part_size=max_bytes)
    fields = form.get("request") or "{}"
    body = _validated(fields if isinstance(fields, str) else "{}")
    if body.cover is not None:
        raise bad_request("cover: upload the cover as the 'cover' file", "cover",
                          "invalid_value")
    upload, image = form.get("file"), form.get("cover")
    cover = await _read(image, "cover", MAX_COVER_BYTES) if image is not None else None
    if upload is None:
        if image is None:
            raise bad_request("file: upload an EPUB as the 'file' field (or give 'input' in "
                              "'request' with a 'cover')", "file", "invalid_value")
        return JobRequest(body, hashlib.sha256(cover or b"").digest(), cover)
    data = await _read(upload, "file", max_bytes)
    if body.input is not None or body.chapters is not None:
        raise bad_request("input: give the text as the EPUB file or as JSON, not both",
                          "input", "invalid_value")
    try:
        parsed = await anyio.to_thread.run_sync(epub_chapters, data)
    except BadEpub as exc:
        raise bad_request(str(exc), "file", "invalid_epub") from None
    chapters = [Chapter(title=(c["title"] or "")[:500] or None, input=c["input"]) for c in parsed]
    return JobRequest(body.model_copy(update={"chapters": chapters}),
                      hashlib.sha256(data + (cover or b"")).digest(), cover)


def _validated(raw: str | bytes) -> JobBody:
    try:
        return JobBody.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


async def _read(part: object, name: str, limit: int) -> bytes:
    if not isinstance(part, UploadFile):
        raise bad_request(f"{name}: must be a file", name, "invalid_value")
    data = await part.read(limit + 1)
    if len(data) > limit:
        raise ApiError(413, f"{name}: larger than {limit // (1024 * 1024)} MB",
                       param=name, code="file_too_large")
    return data


def _base64_cover(text: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise bad_request("cover: not base64 (give a JPEG or PNG as base64, or upload it as "
                          "a multipart 'cover' file)", "cover", "invalid_value") from None
    if len(data) > MAX_COVER_BYTES:
        raise ApiError(413, f"cover: larger than {MAX_COVER_BYTES // (1024 * 1024)} MB",
                       param="cover", code="file_too_large")
    return data


def check_cover(data: bytes) -> str:
    """Decode a cover image whole and return its extension (jpg or png), or raise a 400."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=["JPEG", "PNG"]) as image:
            width, height = image.size
            if max(width, height) > MAX_COVER_SIDE:
                raise bad_request(f"cover: {width}x{height} is over {MAX_COVER_SIDE} pixels "
                                  "a side", "cover", "invalid_image")
            image.load()  # every pixel: a truncated or corrupt file fails here
            kind = image.format
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise bad_request("cover: not a JPEG or PNG image that decodes", "cover",
                          "invalid_image") from None
    return "jpg" if kind == "JPEG" else "png"
