"""Bad input gets a clear 4xx in OpenAI's error shape, and nothing is stored."""

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from tests.conftest import count_jobs, error_of
from tests.support import Stack

OK: dict[str, Any] = {"model": "piper", "voice": "joe", "input": "Hello."}

CASES: list[tuple[str, dict[str, Any] | str, str | None, str]] = [
    # (name, body, param, text the message must contain)
    ("empty input", OK | {"input": ""}, "input", "must not be empty"),
    ("missing input", {"model": "piper", "voice": "joe"}, "input", "required"),
    ("control characters only", OK | {"input": "\x01\x02\x1b"}, "input", "nothing to speak"),
    ("a NUL character", OK | {"input": "Hello\x00."}, "input", "NUL"),
    ("an integer past 64 bits", OK | {"seed": 10**30}, "seed", "64-bit"),
    ("a number past float range", '{"input": "Hello.", "speed": 1e400}', "speed", "finite"),
    ("unknown voice", OK | {"voice": "nobody"}, "voice", "available: joe"),
    ("unknown format", OK | {"response_format": "ogg"}, "response_format", "'mp3'"),
    ("speed too low", OK | {"speed": 0.1}, "speed", "0.25"),
    ("speed too high", OK | {"speed": 4.5}, "speed", "4"),
    ("input not a string", OK | {"input": 123}, "input", "string"),
    ("speed not a number", OK | {"speed": "fast"}, "speed", "number"),
    ("voice wrong type", OK | {"voice": 7}, "voice", "string"),
    ("unknown model", OK | {"model": "tts-9"}, "model", "available: piper"),
    ("unknown field", OK | {"colour": "blue"}, "colour", "unknown field"),
    ("seed on a model without it", OK | {"seed": 3}, "seed", "not supported"),
    ("language the voice lacks", OK | {"language": "de"}, "language", "en-US"),
    ("unknown lexicon", OK | {"lexicons": ["nobody-made-this"]}, "lexicons",
     "no lexicon 'nobody-made-this'"),
    ("too many lexicons", OK | {"lexicons": ["a", "b", "c", "d", "e", "f"]}, "lexicons",
     "at most 5"),
    ("malformed JSON", '{"input": "Hello.",', None, "not valid JSON"),
    ("body not an object", "[1, 2]", None, ""),
]


def _files(folder: Path | None) -> set[Path]:
    return set(folder.rglob("*")) if folder and folder.exists() else set()


def _post(stack: Stack, path: str, body: dict[str, Any] | str) -> Any:
    with stack.client() as http:
        if isinstance(body, str):
            return http.post(path, content=body, headers={"content-type": "application/json"})
        return http.post(path, json=body)


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/jobs"])
@pytest.mark.parametrize(("name", "body", "param", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_400_and_nothing_is_stored(
    local_stack: Stack, db: Engine, path: str, name: str, body: dict[str, Any] | str,
    param: str | None, words: str,
) -> None:
    jobs, files = count_jobs(db), _files(local_stack.media)
    response = _post(local_stack, path, body)
    assert response.status_code == 400, (name, response.text)
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert words in error["message"]
    assert count_jobs(db) == jobs
    assert _files(local_stack.media) == files


def test_sync_text_over_the_limit_points_at_jobs(local_stack: Stack, db: Engine) -> None:
    jobs = count_jobs(db)
    response = _post(local_stack, "/v1/audio/speech", OK | {"input": "a" * 4097})
    error = error_of(response)
    assert response.status_code == 400
    assert error["code"] == "input_too_long"
    assert "/v1/audio/jobs" in error["message"]
    assert "4096" in error["message"]
    assert count_jobs(db) == jobs


@pytest.mark.parametrize("body", [
    {"input": "a", "chapters": [{"input": "b"}]},
    {"chapters": []},
    {"chapters": [{"title": "x", "input": "  "}]},
    {"input": "Hello.", "subtitles": ["ass"]},
    {"input": "Bonjour.", "language": "fr", "subtitles": ["srt", "words"]},
    {"input": "Hello.", "verify": "again"},
    {"input": "Bonjour.", "language": "fr", "verify": "flag"},
    {"input": "Hello.", "output_url": "s3://elsewhere/prefix"},
    {"input": "x" * 2_000_001},
], ids=["input and chapters", "no chapters", "blank chapter", "bad subtitle kind",
        "word times in a language not aligned", "verify of no known kind",
        "verify in a language not recognised", "output_url not allowed",
        "over the job limit"])
def test_bad_job_bodies_are_400_and_create_nothing(local_stack: Stack, db: Engine,
                                                   body: dict[str, Any]) -> None:
    jobs = count_jobs(db)
    response = _post(local_stack, "/v1/audio/jobs", body)
    assert response.status_code == 400, response.text
    error_of(response)
    assert count_jobs(db) == jobs


def test_bad_query_parameters_are_400(local_stack: Stack) -> None:
    with local_stack.client() as http:
        for params in ({"limit": 0}, {"limit": 1000}, {"status": "weird"}, {"after": "zz"}):
            response = http.get("/v1/audio/jobs", params=params)
            assert response.status_code == 400, params
            error_of(response)
