"""Re-rendering part of a completed job: only that part is synthesised, versions stay."""

from typing import Any

import pytest
from sqlalchemy import Engine, text

from tests.conftest import error_of
from tests.support import TOMATO, Stack, fruit_heard, wait_job

CHAPTERS = [{"title": "One", "input": "The boats came in at dawn."},
            {"title": "Two", "input": TOMATO},
            {"title": "Three", "input": "Fish were sold by noon. The square emptied slowly."}]


def _segments(db: Engine, job_id: str) -> list[tuple[int, int, int]]:
    with db.connect() as connection:
        return [(int(r[0]), int(r[1]), int(r[2])) for r in connection.execute(text(
            "SELECT index, chapter, attempts FROM segments WHERE job_id = :id ORDER BY index"),
            {"id": job_id.removeprefix("job_")}).all()]


@pytest.mark.parametrize("fmt", ["wav", "mp3"])  # mp3: the changed fragments only
def test_a_chapter_is_rendered_again_alone_and_both_versions_download(
        local_stack: Stack, db: Engine, fmt: str) -> None:
    with local_stack.client() as http:
        http.post("/v1/audio/lexicons", json={"name": f"rerender-fruit-{fmt}",
                                               "entries": [{"text": "tomato",
                                                            "alias": "banana"}]})
        created = http.post("/v1/audio/jobs", json={"chapters": CHAPTERS, "subtitles": ["vtt"],
                                                    "response_format": fmt})
        first = wait_job(http, created.json()["id"])
        assert first["status"] == "completed", first
        assert first["version"] == 1
        assert first["versions"] == []
        v1 = http.get(first["result"]["url"]).content
        v1_two = http.get(first["result"]["chapters"][1]["url"]).content
        before = _segments(db, first["id"])
        assert {attempts for _, _, attempts in before} == {1}

        again = http.post(f"/v1/audio/jobs/{first['id']}/rerender",
                          json={"chapters": [1], "lexicons": [f"rerender-fruit-{fmt}"]})
        assert again.status_code == 202, again.text
        assert again.json()["version"] == 2
        second = wait_job(http, first["id"])
        assert second["status"] == "completed", second
        versions = second["versions"]
        assert [v["version"] for v in versions] == [1]
        old = http.get(versions[0]["url"])
        assert old.status_code == 200
        assert old.content == v1  # version 1 as it was
        assert http.get(versions[0]["chapters"][1]["url"]).content == v1_two
        v2_two = http.get(second["result"]["chapters"][1]["url"]).content
        manifest = http.get(second["result"]["manifest_url"]).json()
    # Only chapter two's segments ran again (attempts: engine runs); the rest were reused.
    assert [(chapter, attempts) for _, chapter, attempts in _segments(db, first["id"])] == \
        [(chapter, 2 if chapter == 1 else 1) for _, chapter, _ in before]
    assert [s["attempts"] for s in manifest["segments"]] == \
        [2 if chapter == 1 else 1 for _, chapter, _ in before]
    assert fruit_heard(v1_two) == {"tomato"}
    assert fruit_heard(v2_two) == {"banana"}
    assert len(versions) == 1
    # Cues come from the words of the re-rendered segment too, read with its new lexicon.
    assert {s["timing"] for s in manifest["segments"]} == {"aligned"}


def test_bad_rerenders_are_refused_and_change_nothing(local_stack: Stack) -> None:
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({}, 400, None), ({"chapters": [3]}, 400, "chapters"),
        ({"segments": [{"from": 2, "to": 1}]}, 400, "segments"),
        ({"segments": [{"from": 0, "to": 99}]}, 400, "segments"),
        ({"chapters": [0], "voice": "nova"}, 400, "voice"),
        ({"chapters": [0], "seed": 7}, 400, "seed"),
        ({"chapters": [0], "lexicons": ["no-such-lexicon"]}, 400, "lexicons"),
        ({"chapters": [0], "input": "new words"}, 400, "input")]
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={"chapters": CHAPTERS}).json()["id"])
        for body, status, param in cases:
            response = http.post(f"/v1/audio/jobs/{job['id']}/rerender", json=body)
            assert response.status_code == status, (body, response.text)
            assert error_of(response)["param"] == param, body
        after = http.get(f"/v1/audio/jobs/{job['id']}").json()
        running = http.post("/v1/audio/jobs", json={"input": "A long text. " * 300}).json()
        refused = http.post(f"/v1/audio/jobs/{running['id']}/rerender", json={"chapters": [0]})
        http.post(f"/v1/audio/jobs/{running['id']}/cancel")
    assert (after["status"], after["version"], after["versions"]) == ("completed", 1, [])
    assert refused.status_code == 409
    assert error_of(refused)["code"] == "job_not_completed"


def test_a_chapter_given_new_text_is_planned_again_and_the_rest_is_moved_not_resynthesised(
        local_stack: Stack, db: Engine) -> None:
    longer = ("The boats came in late that morning.\n\nThe gulls were gone.\n\n"
              "Nobody on the pier said a word about it.")
    with local_stack.client() as http:
        job = wait_job(http, http.post("/v1/audio/jobs", json={
            "chapters": CHAPTERS, "subtitles": ["vtt"], "response_format": "wav"}).json()["id"])
        assert job["status"] == "completed", job
        before = _segments(db, job["id"])
        grown = http.post(f"/v1/audio/jobs/{job['id']}/rerender", json={"inputs": {"0": longer}})
        assert grown.status_code == 202, grown.text
        v2 = wait_job(http, job["id"])
        assert v2["status"] == "completed", v2
        grown_rows = _segments(db, job["id"])
        vtt = http.get(v2["result"]["subtitles"]["vtt"]).text
        two = http.get(v2["result"]["chapters"][1]["url"]).content
        shrunk = http.post(f"/v1/audio/jobs/{job['id']}/rerender",
                           json={"inputs": {"0": "Dawn."}})
        assert shrunk.status_code == 202, shrunk.text
        v3 = wait_job(http, job["id"])
        assert v3["status"] == "completed", v3
        manifest = http.get(v3["result"]["manifest_url"]).json()
        first = http.get(v3["versions"][0]["url"]).content
        original = http.get(http.get(f"/v1/audio/jobs/{job['id']}").json()["versions"][0]["url"])
    # Chapter one became three segments: the others moved down by two, their parts with them
    # (the assembly checks each part's samples: a part left behind would be synthesised
    # again, and its attempts would show it).
    assert [c for _, c, _ in grown_rows] == [0, 0, 0] + [c for _, c, _ in before[1:]]
    assert [a for _, c, a in grown_rows if c > 0] == [a for _, c, a in before if c > 0]
    assert "The gulls were gone." in vtt
    assert "The boats came in at dawn." not in vtt
    assert fruit_heard(two) == {"tomato"}
    # Then one again: the rest moved back up, still not synthesised again.
    assert [(s["chapter"], s["attempts"]) for s in manifest["segments"]] == \
        [(0, 1)] + [(c, a) for _, c, a in before[1:]]
    assert [v["version"] for v in v3["versions"]] == [1, 2]
    assert first == original.content
    assert v3["usage"]["input_characters"] == len("Dawn.") + sum(
        len(c["input"]) for c in CHAPTERS[1:])
