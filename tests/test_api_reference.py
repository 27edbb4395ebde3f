"""The API reference and the app say the same thing: docs/api.md is what the app's OpenAPI
schema generates, every route says what it does, and every body field has a meaning."""

import ast
from pathlib import Path
from typing import Any

from api.error_codes import ANSWERS, JOB_FAILURES
from narrator.api_reference import render, schema

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_is_what_the_app_generates() -> None:
    written = (ROOT / "docs" / "api.md").read_text()
    assert written == render(), "run: python -m narrator.api_reference > docs/api.md"


def test_every_route_and_body_field_is_described() -> None:
    spec = schema()
    models: dict[str, Any] = dict(spec["components"]["schemas"])
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            assert operation.get("description"), f"{method.upper()} {path}: no docstring"
            for entry in operation.get("requestBody", {}).get("content", {}).values():
                models.update(entry["schema"].get("$defs", {}))
                body = entry["schema"]
                body = models[body["$ref"].rsplit("/", 1)[1]] if "$ref" in body else body
                for name, prop in body.get("properties", {}).items():
                    assert prop.get("description"), f"{method.upper()} {path}: {name}"


# The calls that raise an API error, and which positional argument is the code (None: only
# by keyword); `_fail` fails a job (workers/jobs/pipeline.py).
RAISING = {"ApiError": None, "bad_request": 2, "too_many": 1, "_conflict": 1, "unavailable": None,
           "not_found": None, "_refuse": 0}


def codes_in(folder: str, calls: dict[str, int | None]) -> set[str]:
    """Every constant code in `folder`'s source: a `code=` keyword or the code's position in
    one of `calls`, or an `{"code": ...}` dict entry."""
    found: list[ast.expr] = []
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                if name not in calls:
                    continue
                found += [k.value for k in node.keywords if k.arg == "code"]
                at = calls[name]
                found += node.args[at:at + 1] if at is not None else []
            elif isinstance(node, ast.Dict):
                found += [v for k, v in zip(node.keys, node.values, strict=True)
                          if isinstance(k, ast.Constant) and k.value == "code"]
    return {e.value for e in found if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def test_every_error_code_is_in_the_reference_and_every_listed_one_is_used() -> None:
    answers = codes_in("api", RAISING)
    failures = codes_in("workers", {"_fail": 2})
    assert answers == set(ANSWERS), "api/error_codes.py ANSWERS and the API disagree"
    assert failures == set(JOB_FAILURES), "api/error_codes.py JOB_FAILURES and workers disagree"
    assert {"voice_not_found", "worker_lost", "rate_limit_exceeded"} <= answers  # it reads them
    text = (ROOT / "docs" / "api.md").read_text()
    assert all(f"| `{code}` |" in text for code in answers | failures)


def test_every_field_of_the_job_object_is_described() -> None:
    """The renderer's fields, a completed job's result with every optional part included."""
    import uuid

    from core.views import JOB_FIELDS, RESULT_FIELDS, job_object
    from models import Job, JobStatus, utcnow

    result = {"key": "a.mp3", "duration_seconds": 1.0, "bytes": 10, "sample_rate": 22050,
              "chapters": [{"title": "One", "start_seconds": 0.0, "duration_seconds": 1.0,
                            "key": "c.mp3"}],
              "subtitles": {"srt": "s.srt"}, "manifest_key": "m.json",
              "verification": {}, "mastering": {"profile": "acx", "ok": True}}
    job = Job(id=uuid.uuid4(), status=JobStatus.completed, model="piper", voice="joe",
              response_format="mp3", created_at=utcnow(), segments_total=1, segments_done=1,
              segments_failed=0, input_characters=5, audio_seconds=1.0, result=result,
              options={"book": {"title": "T"}, "lexicons": ["x"]}, meta=None, version=2,
              versions={"1": {"completed_at": None, "result": result}})
    rendered = job_object(job, lambda key, local: local, "http://api")
    job.status = JobStatus.in_progress  # the queue is shown only then
    in_progress = job_object(job, lambda key, local: local, "http://api", queue=(1, 2))
    assert set(rendered) | set(in_progress) == set(JOB_FIELDS)
    assert set(rendered["result"]) == set(RESULT_FIELDS)
    assert set(rendered["versions"][0]) - {"version", "completed_at"} == set(RESULT_FIELDS)
    assert "## The job object" in (ROOT / "docs" / "api.md").read_text()
