"""Voices per chapter and per speaker: `[voice:name]` marks, a job's cast, chapter voices."""

import json
import uuid
from typing import Any

import numpy as np
from sqlalchemy import Engine, text

from core.text import Gaps, check_plan, plan_pieces, speakers, strip_pauses
from tests.conftest import count_jobs, error_of
from tests.support import Stack, insert_job, wait_job

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


class CastEngine:
    """A GPU-engine double with two voices that speaks with Piper and records the voice each
    request asked for (one real CPU voice exists: the audio cannot tell voices apart)."""

    def __init__(self) -> None:
        from dataclasses import replace

        from core.catalog import catalog
        from workers.engines.piper import PiperEngine
        from workers.settings import get_settings

        self.piper = PiperEngine(catalog(get_settings())[0])
        self.info = replace(self.piper.info, engine="vllm-omni")
        self.voices: dict[str, str] = {}

    @property
    def sample_rate(self) -> int:
        return self.piper.sample_rate

    def synthesize(self, requests: list[Any]) -> list[np.ndarray]:
        from dataclasses import replace

        for request in requests:
            self.voices[request.request_id] = request.voice
        return self.piper.synthesize([replace(r, voice="joe") for r in requests])


def test_each_segment_is_spoken_in_its_speakers_voice_and_the_files_say_who(
        pipeline_env: None, db: Engine) -> None:
    from storage import store_for
    from workers import pipeline

    options = {"subtitles": ["vtt"], "cast": {
        "alice": {"name": "Alice", "voice": "ryan"}, "bob": {"name": "Bob", "voice": "aiden"}},
        "chapter_voices": {"1": "vivian"}}
    job_id = uuid.UUID(str(insert_job(db, [SCENE, "The morning came."], "wav", options)))
    _, ids = pipeline.plan(job_id)
    engine: Any = CastEngine()
    for segment_id in ids:
        assert pipeline.synthesize(segment_id, engine=engine) is not None
    assert pipeline.assemble(job_id).outcome == "completed"
    assert [engine.voices[f"{job_id}-{n}"] for n in range(7)] == [
        "joe", "ryan", "aiden", "joe", "joe", "ryan", "vivian"]
    with db.connect() as connection:
        result = connection.execute(text("SELECT result FROM jobs WHERE id = :id"),
                                    {"id": job_id}).scalar_one()
    store = store_for()
    with store.open(result["manifest_key"]) as f:
        manifest = json.load(f)
    with store.open(result["subtitles"]["vtt"]) as f:
        vtt = f.read().decode()
    assert [(s.get("speaker"), s["voice"]) for s in manifest["segments"]] == [
        (None, "joe"), ("alice", "ryan"), ("bob", "aiden"), (None, "joe"), (None, "joe"),
        ("alice", "ryan"), (None, "vivian")]
    assert '<v Alice>"Who is there?" she asked.' in vtt
    assert '<v Bob>"Only me."' in vtt
    assert "\nNobody moved." in vtt  # the narrator: no voice tag


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
