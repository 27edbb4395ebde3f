"""A segment is spoken in its speaker's voice: the pipeline in process, with a GPU-engine
double that has more voices than the one CPU voice packaged (its own database: the session
stacks' reapers must not meet its rows)."""

import json
import uuid
from typing import Any

import numpy as np
from sqlalchemy import Engine, text

from tests.isolation import isolated_database_url, isolated_db  # noqa: F401
from tests.support import insert_job
from tests.test_cast import SCENE


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
    from workers.jobs import pipeline

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
