"""`POST /v1/audio/jobs/batch`: up to MAX_JOBS ordinary jobs in one request.

The body is a JSON array of job bodies, `{"jobs": [...]}`, JSON Lines (`application/jsonl`
or `application/x-ndjson`), or a multipart upload of a JSONL `file` (as OpenAI's Batch API
takes one). Every body is checked as `POST /v1/audio/jobs` checks it before any is stored: the
first one that is wrong is a 400 whose `param` names it (`jobs.12.input`). Then the jobs are
inserted in one transaction (SQLAlchemy sends them as multi-row INSERTs, 1,000 rows a
statement), their plan tasks are published MAX_BATCH per broker message, and their ids come
back in order. One `Idempotency-Key` covers the batch: job n stores `<key>/<n>`, so a replay
returns the same ids, and the same key with another body is a 409. Covers are not taken here
(submit a job with a cover alone).
"""

import hashlib
from typing import Annotated, Any

import anyio.lowlevel
import orjson
import structlog
from fastapi import APIRouter, Header, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from starlette.datastructures import UploadFile

from api.admission import COLUMN_KEYS, INSERT_JOB, Shared, job_values
from api.errors import ApiError, Json, bad_request, unavailable
from api.quota import reserve
from api.schemas import JobBody
from api.state import OwnerDep, SessionDep, StateDep
from core import ids
from models import Job

router = APIRouter()
log = structlog.get_logger()
MAX_JOBS = 10_000
CHUNK = 1000  # rows per INSERT statement and per replay lookup
# A 10,000-job batch keeps the event loop busy for about 1.5 s (bench.batch): hand the loop
# back every so many bodies, so the requests around it are not held up for all of it.
YIELD_EVERY = 50
JSONL = ("application/jsonl", "application/x-ndjson", "application/jsonlines",
         "application/x-jsonlines")


@router.post("/v1/audio/jobs/batch", status_code=202)
async def create_batch(request: Request, state: StateDep, session: SessionDep, owner: OwnerDep,
                       idempotency_key: Annotated[str | None, Header(max_length=240)] = None,
                       ) -> Json:
    """Create many jobs at once: all of them or none."""
    raw = await _raw(request, state.settings.max_body_bytes)
    bodies = await _validated(_items(raw, request.headers.get("content-type", "")))
    digest = hashlib.sha256(orjson.dumps([b.model_dump(mode="json") for b in bodies],
                                         option=orjson.OPT_SORT_KEYS)).hexdigest()
    shared = await Shared.load(state, session, owner)
    rows = []
    for n, body in enumerate(bodies):
        if n % YIELD_EVERY == YIELD_EVERY - 1:
            await anyio.lowlevel.checkpoint()  # the loop serves other requests
        key = f"{idempotency_key}/{n}" if idempotency_key else None
        try:
            rows.append(await job_values(body, shared, key, digest, None))
        except ApiError as exc:
            raise _at(exc, n) from None
    if idempotency_key:
        replayed = await _replay(session, owner, idempotency_key, len(rows), digest)
        if replayed is not None:
            return replayed
    columns = [{COLUMN_KEYS[k]: v for k, v in row.items()} for row in rows]
    try:
        await reserve(session, owner, state.settings, sum(r["input_characters"] for r in rows),
                      jobs=len(rows))
        connection = await session.connection()
        for start in range(0, len(columns), CHUNK):
            await connection.execute(INSERT_JOB, columns[start:start + CHUNK])
        await session.commit()
    except IntegrityError:  # the same key, submitted at the same moment by another request
        await session.rollback()
        replayed = await _replay(session, owner, idempotency_key or "", len(rows), digest)
        if replayed is None:
            raise
        return replayed
    keys = [row["id"] for row in rows]
    try:
        await state.planner.plan_all([str(k) for k in keys])
    except Exception as exc:  # nobody has seen these jobs yet: remove them
        for start in range(0, len(keys), CHUNK):
            await session.execute(delete(Job).where(Job.id.in_(keys[start:start + CHUNK])))
        await session.commit()
        raise unavailable(f"the broker is unreachable, no job was created: {exc}") from exc
    log.info("jobs.batch", jobs=len(keys), owner=owner or None)
    return _answer([ids.job_id(k) for k in keys])


async def _raw(request: Request, max_bytes: int) -> bytes:
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form(max_files=1, max_fields=1, max_part_size=max_bytes)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise bad_request("file: upload the jobs as a JSONL 'file'", "file", "invalid_value")
        data = await upload.read(max_bytes + 1)
    else:
        data = await request.body()  # api/body.py holds it to MAX_BODY_BYTES
    if len(data) > max_bytes:
        raise ApiError(413, f"the batch is over {max_bytes} bytes", code="body_too_large")
    return data


def _items(raw: bytes, kind: str) -> list[Any]:
    """Return the raw job bodies: JSON Lines for a JSONL type or an upload, else JSON."""
    lines = kind.startswith(JSONL) or kind.startswith("multipart/form-data")
    items: Any
    try:
        if lines:
            items = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            parsed = orjson.loads(raw)
            items = parsed.get("jobs") if isinstance(parsed, dict) else parsed
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the batch is not valid {'JSON Lines' if lines else 'JSON'}: {exc}",
                          None, "invalid_json") from None
    if not isinstance(items, list):
        raise bad_request("jobs: give a JSON array of job bodies, {\"jobs\": [...]}, or "
                          "JSON Lines", "jobs", "invalid_value")
    if not items:
        raise bad_request("jobs: the batch is empty", "jobs", "empty_input")
    if len(items) > MAX_JOBS:
        raise bad_request(f"jobs: {len(items)} jobs is over the limit of {MAX_JOBS} per batch",
                          "jobs", "too_many_jobs")
    return items


async def _validated(items: list[Any]) -> list[JobBody]:
    bodies = []
    for n, item in enumerate(items):
        if n % YIELD_EVERY == YIELD_EVERY - 1:
            await anyio.lowlevel.checkpoint()
        try:
            body = JobBody.model_validate(item)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("jobs", n, *e["loc"])}
                                          for e in exc.errors()]) from None
        if body.cover is not None:
            raise bad_request(f"jobs.{n}.cover: covers are not taken in a batch; submit that "
                              "job alone", f"jobs.{n}.cover", "invalid_value")
        bodies.append(body)
    return bodies


def _at(exc: ApiError, n: int) -> ApiError:
    """Return the error of job n's body, named after it."""
    param = f"jobs.{n}" + (f".{exc.param}" if exc.param else "")
    return ApiError(exc.status_code, f"jobs.{n}: {exc.message}", type=exc.type, param=param,
                    code=exc.code, headers=exc.headers)


async def _replay(session: Any, owner: str, key: str, count: int, digest: str) -> Json | None:
    """Return the answer of a batch already created under `key`, or None if there is none
    (a 409 if it was created from another body)."""
    first = await session.scalar(select(Job.request_hash).where(
        Job.owner == owner, Job.idempotency_key == f"{key}/0"))
    if first is None:
        return None
    if first != digest:
        raise ApiError(409, "Idempotency-Key was already used with a different request body",
                       type="conflict_error", param="Idempotency-Key",
                       code="idempotency_key_reused")
    found: dict[str, Any] = {}
    names = [f"{key}/{n}" for n in range(count)]
    for start in range(0, count, CHUNK):
        rows = await session.execute(select(Job.idempotency_key, Job.id).where(
            Job.owner == owner, Job.idempotency_key.in_(names[start:start + CHUNK])))
        found |= dict(rows.tuples().all())
    return _answer([ids.job_id(found[name]) for name in names if name in found], replayed=True)


def _answer(job_ids: list[str], replayed: bool = False) -> Json:
    return Json({"object": "audio.job.batch", "count": len(job_ids), "ids": job_ids},
                status_code=202, headers={"Idempotent-Replayed": "true"} if replayed else None)
