"""Voices per chapter and per speaker: `[voice:name]` marks, a job's cast, chapter voices."""


from sqlalchemy import Engine

from core.text import Gaps, check_plan, plan_pieces, speakers, strip_pauses
from tests.conftest import count_jobs, error_of
from tests.support import Stack, wait_job

SCENE = ('The night was cold. [voice:Alice] "Who is there?" she asked. [voice:bob] "Only me." '
         '[voice] Nobody moved.\n\nThe wind rose. [voice:alice] "Then come in." '
         "A \\[voice:x] sign hung on the door.")


def test_marks_split_the_plan_so_each_segment_has_one_speaker() -> None:
    pieces = list(plan_pieces([SCENE], 400, Gaps()))
    assert [(p.speaker, p.text) for p in pieces] == [
        (None, "The night was cold."),
        ("alice", '"Who is there?" she asked.'),
        ("bob", '"Only me."'),
        (None, "Nobody moved."),
        (None, "The wind rose."),
        ("alice", '"Then come in." A [voice:x] sign hung on the door.')]
    check_plan([SCENE], pieces)  # every letter kept, the marks and the escape aside
    assert speakers(SCENE) == ["alice", "bob", "alice"]
    assert "[voice:a" not in strip_pauses(SCENE).lower()
    assert "A [voice:x] sign" in strip_pauses(SCENE)


def test_preview_shows_the_cast_and_who_speaks_each_part(local_stack: Stack) -> None:
    with local_stack.client() as http:
        response = http.post("/v1/audio/jobs/preview", json={
            "chapters": [{"title": "Night", "input": SCENE}, {"input": "Morning.", "voice": "joe"}],
            "cast": {"Alice": "joe", "bob": "JOE"}})
    assert response.status_code == 200, response.text
    preview = response.json()
    assert preview["cast"] == {"Alice": "joe", "bob": "joe"}
    night = preview["chapters"][0]
    assert [(p["speaker"], p["voice"]) for p in night["parts"]] == [
        (None, "joe"), ("alice", "joe"), ("bob", "joe"), (None, "joe"), ("alice", "joe")]
    assert night["parts"][1]["excerpt"] == '"Who is there?" she asked.'
    assert preview["chapters"][1]["voice"] == "joe"


def test_a_job_with_a_cast_completes_and_its_vtt_names_the_speakers(local_stack: Stack) -> None:
    with local_stack.client() as http:
        created = http.post("/v1/audio/jobs", json={
            "input": SCENE, "cast": {"Alice": "joe", "Bob": "joe"}, "subtitles": ["vtt"],
            "response_format": "wav"})
        assert created.status_code == 202, created.text
        job = wait_job(http, created.json()["id"])
        assert job["status"] == "completed", job
        vtt = http.get(job["result"]["subtitles"]["vtt"]).text
        manifest = http.get(job["result"]["manifest_url"]).json()
    assert "<v Alice>" in vtt
    assert "<v Bob>" in vtt
    assert [s.get("speaker") for s in manifest["segments"]] == [
        None, "alice", "bob", None, None, "alice"]


BAD = [
    ("a speaker nobody plays", {"input": "Hi. [voice:carol] Hello."}, "input", "carol"),
    ("a cast voice the model lacks", {"input": "[voice:alice] Hi.", "cast": {"alice": "nova"}},
     "cast.alice", "unknown voice 'nova'"),
    ("a chapter voice the model lacks", {"chapters": [{"input": "Hi.", "voice": "nova"}]},
     "chapters.0.voice", "unknown voice 'nova'"),
    ("a speaker in chapter two", {"chapters": [{"input": "Hi."}, {"input": "[voice:dan] Yo."}]},
     "chapters.1.input", "[voice:dan]"),
    ("a chapter index past the end", {"input": "Hi.", "chapter_voices": {"1": "joe"}},
     "chapter_voices.1", "1 chapter(s)"),
    ("a chapter_voices voice the model lacks", {"input": "Hi.", "chapter_voices": {"0": "x"}},
     "chapter_voices.0", "unknown voice 'x'"),
    ("a cast name with markup", {"input": "Hi.", "cast": {"<b>": "joe"}}, "cast.<b>.[key]",
     "pattern"),
]


def test_bad_casts_are_400_naming_what_is_unknown_and_nothing_is_stored(
        local_stack: Stack, db: Engine) -> None:
    for name, body, param, words in BAD:
        jobs = count_jobs(db)
        with local_stack.client() as http:
            for path in ("/v1/audio/jobs", "/v1/audio/jobs/preview"):
                response = http.post(path, json=body)
                assert response.status_code == 400, (name, response.text)
                error = error_of(response)
                assert error["param"] == param, (name, error)
                assert words in error["message"], (name, error)
        assert count_jobs(db) == jobs, name
