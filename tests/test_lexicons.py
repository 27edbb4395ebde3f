"""Pronunciation lexicons: the matching rules, the API, and Piper speaking what they say."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from core.lexicon import merged, reader
from tests.conftest import count_jobs, error_of, redis_url
from tests.support import TOMATO, Stack, fruit_heard, registered, wait_job

AS_BANANA = [{"text": "tomato", "alias": "banana"}]
AS_BANANA_IPA = [{"text": "Tomato", "ipa": "bənˈænə"}]  # Piper's phonemes for "banana"
QWEN = Path(__file__).parent / "data" / "qwen3-tts-0.6b-customvoice"


def said(entries: list[dict[str, Any]], written: str, normalize: bool = True) -> str:
    return reader("en", normalize, entries)(written)


def test_entries_match_whole_words_ignoring_case_unless_told() -> None:
    entries: list[dict[str, Any]] = [
        {"text": "Ann", "alias": "Anne-Marie"},
        {"text": "US", "alias": "United States", "match_case": True}]
    assert said(entries, "Ann met ANN and ann in the Annex.") == \
        "Anne-Marie met Anne-Marie and Anne-Marie in the Annex."
    assert said(entries, "Ann's car took us to the US.") == \
        "Anne-Marie's car took us to the United States."


def test_phrases_match_across_whitespace_and_the_longest_wins_once() -> None:
    entries = [{"text": "New York", "alias": "the big apple"}, {"text": "New", "alias": "old"},
               {"text": "apple", "alias": "pear"}]
    # "apple" in the replacement is not matched again; a capital is carried over.
    assert said(entries, "New  York is new,\nNew\nYork too.") == \
        "The big apple is old,\nThe big apple too."


def test_the_lexicon_comes_before_numbers_and_titles_are_still_read() -> None:
    entries = [{"text": "Nguyen", "alias": "win"}, {"text": "R2-D2", "alias": "artoo deetoo"}]
    assert said(entries, "Mr. Nguyen met R2-D2 in 1984.") == \
        "Mister Win met Artoo deetoo in nineteen eighty-four."
    assert said(entries, "Mr. Nguyen met R2-D2 in 1984.", normalize=False) == \
        "Mr. Win met Artoo deetoo in 1984."


def test_ipa_becomes_pipers_inline_phonemes() -> None:
    assert said(AS_BANANA_IPA, TOMATO) == "He put the [[ bənˈænə ]] on the table."


def test_an_earlier_lexicons_entry_wins() -> None:
    first = [{"text": "Joe", "alias": "Joseph"}]
    second = [{"text": "JOE", "alias": "Jo"}, {"text": "Sam", "alias": "Samuel"}]
    assert merged([first, second]) == [*first, second[1]]


def test_threads_applying_lexicons_at_once_get_what_one_thread_gets() -> None:
    """Compiled lexicons are cached and shared: many threads, many lexicons, one answer."""
    lexicons = [[{"text": f"name{n}", "alias": f"alias{n}"}, {"text": "Joe", "alias": f"J{n}"}]
                for n in range(40)]
    texts = [f"Joe met name{n} and name{n + 1}." for n in range(40)]
    alone = [said(lexicons[n], texts[n]) for n in range(40)]
    with ThreadPoolExecutor(16) as pool:
        for _ in range(5):
            together = list(pool.map(lambda n: said(lexicons[n % 40], texts[n % 40]),
                                     range(400)))
            assert together == [alone[n % 40] for n in range(400)]


def _lexicons(db: Engine) -> int:
    with db.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM lexicons")).scalar_one())


def test_create_list_get_replace_and_delete(local_stack: Stack) -> None:
    body = {"name": "crud-names", "entries": [
        {"text": "Nguyen", "alias": "win"}, {"text": "Siobhan", "ipa": "ʃɪvˈɔːn"},
        {"text": "US", "alias": "United States", "match_case": True}]}
    with local_stack.client() as http:
        created = http.post("/v1/audio/lexicons", json=body)
        assert created.status_code == 201, created.text
        lexicon = created.json()
        assert lexicon["id"].startswith("lexicon_")
        assert lexicon["entries"] == body["entries"]
        assert http.post("/v1/audio/lexicons", json=body).status_code == 409
        listed = http.get("/v1/audio/lexicons").json()["data"]
        assert {"name": "crud-names", "entry_count": 3}.items() <= next(
            x for x in listed if x["id"] == lexicon["id"]).items()
        assert http.get(f"/v1/audio/lexicons/{lexicon['id']}").json() == lexicon
        assert http.get("/v1/audio/lexicons/crud-names").json() == lexicon
        replaced = http.put(f"/v1/audio/lexicons/{lexicon['id']}", json={
            "name": "crud-renamed", "entries": [{"text": "Nguyen", "alias": "nuh win"}]})
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["entries"] == [{"text": "Nguyen", "alias": "nuh win"}]
        assert http.get("/v1/audio/lexicons/crud-names").status_code == 404
        deleted = http.delete("/v1/audio/lexicons/crud-renamed")
        assert deleted.json() == {"id": lexicon["id"], "object": "audio.lexicon.deleted",
                                  "deleted": True}
        assert http.get(f"/v1/audio/lexicons/{lexicon['id']}").status_code == 404
        assert http.delete(f"/v1/audio/lexicons/{lexicon['id']}").status_code == 404


ENTRY = {"text": "Nguyen", "alias": "win"}
BAD = [
    ("empty text", {"entries": [{"text": "", "alias": "x"}]}, "entries.0.text"),
    ("text with no word", {"entries": [{"text": "...", "alias": "x"}]}, "entries.0"),
    ("text too long", {"entries": [{"text": "a" * 101, "alias": "x"}]}, "entries.0.text"),
    ("alias too long", {"entries": [{"text": "a", "alias": "b" * 201}]}, "entries.0.alias"),
    ("too many entries", {"entries": [{"text": f"w{n}", "alias": "x"} for n in range(2001)]},
     "entries"),
    ("no entries", {"entries": []}, "entries"),
    ("alias and ipa", {"entries": [{"text": "a", "alias": "b", "ipa": "b"}]}, "entries.0"),
    ("neither", {"entries": [{"text": "a"}]}, "entries.0"),
    ("listed twice", {"entries": [ENTRY, ENTRY | {"text": "NGUYEN"}]}, "entries"),
    ("brackets", {"entries": [{"text": "a", "alias": "[[ b ]]"}]}, "entries.0"),
    ("unknown field", {"entries": [ENTRY | {"sounds": "like"}]}, "entries.0.sounds"),
    ("bad name", {"name": "my/names"}, "name"),
    ("name like an id", {"name": "lexicon_x"}, "name"),
]


@pytest.mark.parametrize(("name", "change", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_lexicons_are_400_and_nothing_is_stored(local_stack: Stack, db: Engine, name: str,
                                                    change: dict[str, Any], param: str) -> None:
    before = _lexicons(db)
    with local_stack.client() as http:
        response = http.post("/v1/audio/lexicons",
                             json={"name": "bad-names", "entries": [ENTRY]} | change)
    assert response.status_code == 400, (name, response.text)
    assert error_of(response)["param"] == param
    assert _lexicons(db) == before


@pytest.fixture(scope="module")
def qwen_model(local_stack: Stack) -> Iterator[str]:
    """A GPU worker's Qwen3-TTS model, as the registry shows it (it takes no phonemes)."""
    with registered(QWEN, "gpu-lexicons:1", redis_url(11)) as model_id:
        yield model_id


def test_ipa_the_engine_cannot_speak_is_a_400(local_stack: Stack, db: Engine,
                                              qwen_model: str) -> None:
    with local_stack.client() as http:
        http.post("/v1/audio/lexicons", json={"name": "ipa-names", "entries": AS_BANANA_IPA})
        http.post("/v1/audio/lexicons", json={"name": "odd-ipa", "entries": [
            {"text": "bird", "ipa": "bɝd"}]})  # ɝ: not in the Piper voice's phoneme map
        jobs = count_jobs(db)
        for path in ("/v1/audio/speech", "/v1/audio/jobs"):
            qwen = http.post(path, json={"model": qwen_model, "input": TOMATO,
                                         "lexicons": ["ipa-names"]})
            assert qwen.status_code == 400, qwen.text
            assert "takes no phonemes" in error_of(qwen)["message"]
            odd = http.post(path, json={"model": "piper", "input": "A bird.",
                                        "lexicons": ["odd-ipa"]})
            assert odd.status_code == 400, odd.text
            assert "ɝ" in error_of(odd)["message"]
        assert count_jobs(db) == jobs


@pytest.mark.parametrize(("name", "entries"), [("alias", AS_BANANA), ("ipa", AS_BANANA_IPA)])
def test_a_job_speaks_the_lexicons_word_and_its_subtitles_keep_the_written_one(
        local_stack: Stack, name: str, entries: list[dict[str, Any]]) -> None:
    with local_stack.client() as http:
        lexicon = http.post("/v1/audio/lexicons", json={"name": f"fruit-{name}",
                                                         "entries": entries}).json()
        plain = http.post("/v1/audio/jobs", json={"input": TOMATO, "response_format": "wav"})
        spelled = http.post("/v1/audio/jobs", json={
            "input": TOMATO, "response_format": "wav", "subtitles": ["vtt"],
            "lexicons": [f"fruit-{name}"]})
        assert spelled.status_code == 202, spelled.text
        assert spelled.json()["lexicons"] == [lexicon["id"]]
        # Edited after submission: the job keeps the entries it was given.
        http.put(f"/v1/audio/lexicons/{lexicon['id']}", json={
            "name": f"fruit-{name}", "entries": [{"text": "tomato", "alias": "apple"}]})
        done = [wait_job(http, job.json()["id"]) for job in (plain, spelled)]
        assert [j["status"] for j in done] == ["completed", "completed"], done
        heard = [fruit_heard(http.get(j["result"]["url"]).content) for j in done]
        vtt = http.get(done[1]["result"]["subtitles"]["vtt"]).text
    assert heard == [{"tomato"}, {"banana"}]
    assert "He put the tomato on the table." in vtt
    assert "banana" not in vtt


def test_sync_speech_speaks_the_lexicons_word(local_stack: Stack) -> None:
    with local_stack.client() as http:
        http.post("/v1/audio/lexicons", json={"name": "fruit-sync", "entries": AS_BANANA})
        response = http.post("/v1/audio/speech", json={
            "input": TOMATO, "response_format": "wav", "lexicons": ["fruit-sync"]})
    assert response.status_code == 200, response.text
    assert fruit_heard(response.content) == {"banana"}
