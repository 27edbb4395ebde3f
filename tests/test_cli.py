"""The client commands `narrator say` and `narrator submit` against a running API, and the
worker command's pool."""

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import TOMATO, Stack, audio_stats, fruit_heard, narrator


def test_say_writes_audio_in_the_format_of_the_extension(local_stack: Stack,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "hello.flac"
    done = subprocess.run(narrator("say", "Hello from the command line.", "-o", str(out),
                                   "--url", local_stack.url),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seconds, rms = audio_stats(out.read_bytes(), "flac")
    assert seconds > 1.0
    assert rms > 0.02


def test_submit_waits_and_downloads(local_stack: Stack, tmp_path: Path) -> None:
    text = tmp_path / "chapter.txt"
    text.write_text("A short chapter.\n\nIt has two paragraphs.", encoding="utf-8")
    out = tmp_path / "chapter.mp3"
    done = subprocess.run(narrator("submit", str(text), "--wait", "-o", str(out),
                                   "--url", local_stack.url),
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job_")
    bar = [line for line in done.stderr.splitlines() if "segments" in line][-1]  # its end
    assert "completed" in bar
    assert "100%" in bar
    assert "2/2 segments" in bar
    seconds, _ = audio_stats(out.read_bytes(), "mp3")
    assert seconds > 2.0


@pytest.mark.parametrize("case", ["missing", "latin-1", "binary", "folder", "cover"])
def test_a_local_file_the_command_cannot_send_is_one_line_of_error(tmp_path: Path,
                                                                   case: str) -> None:
    """Checked before the API is asked (no server runs here): one line, what to do, exit 1."""
    book = tmp_path / "book.txt"
    book.write_text("A fine book.", encoding="utf-8")
    args = [str(book)]
    if case == "missing":
        args = [str(tmp_path / "nowhere.txt")]
    elif case == "latin-1":
        book.write_bytes("Caf\xe9 cr\xe8me, na\xefve.".encode("latin-1"))
    elif case == "binary":
        book.write_bytes(bytes(range(256)) * 4)
    elif case == "folder":
        args = [str(tmp_path)]
    else:
        args += ["--cover", str(tmp_path / "cover.jpg")]
    done = subprocess.run(narrator("submit", *args, "--url", "http://127.0.0.1:9"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    expected = {"missing": "no such file", "latin-1": "not UTF-8 text", "binary": "not UTF-8",
                "folder": "is a folder", "cover": "no such file"}[case]
    assert expected in line


@pytest.mark.parametrize("content", ['[{"text": "Nguyen", "alias": "win"', '{"name": "x"}'])
def test_a_lexicon_file_that_is_not_entries_is_one_line_of_error(tmp_path: Path,
                                                                 content: str) -> None:
    names = tmp_path / "names.json"
    names.write_text(content, encoding="utf-8")
    done = subprocess.run(narrator("lexicon", str(names), "--name", "x", "--url",
                                   "http://127.0.0.1:9"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert ("not valid JSON (line 1" if content.startswith("[") else "a list of entries") in line


def test_submit_asks_for_subtitles(local_stack: Stack, tmp_path: Path) -> None:
    text = tmp_path / "note.txt"
    text.write_text("One sentence. And another one.", encoding="utf-8")
    done = subprocess.run(narrator("submit", str(text), "--subtitles", "srt, words", "--wait",
                                   "--url", local_stack.url),
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    import httpx

    job = httpx.get(f"{local_stack.url}/v1/audio/jobs/{done.stdout.split()[0]}").json()
    assert set(job["result"]["subtitles"]) == {"srt", "words"}


def test_say_reports_api_errors(local_stack: Stack, tmp_path: Path) -> None:
    done = subprocess.run(narrator("say", "x", "-o", str(tmp_path / "a.mp3"), "--voice", "nope",
                                   "--url", local_stack.url),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "unknown voice 'nope'" in done.stderr


def test_retry_of_a_job_that_did_not_fail_says_why(local_stack: Stack, tmp_path: Path) -> None:
    """The happy path of `narrator retry` is the API's (tests/test_retry.py); here the CLI
    prints the API's refusal and exits 1."""
    text = tmp_path / "note.txt"
    text.write_text("Nothing will go wrong here.", encoding="utf-8")
    submitted = subprocess.run(narrator("submit", str(text), "--wait", "--url", local_stack.url),
                               capture_output=True, text=True, timeout=180, check=False)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[0]
    done = subprocess.run(narrator("retry", job_id, "--url", local_stack.url),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "error 409: only a failed job can be retried; this one is completed" in done.stderr


def _worker_argv(monkeypatch: pytest.MonkeyPatch, engine: str, queues: str,
                 cores: int = 4) -> list[str]:
    """Return the Celery argv `narrator worker` builds for `engine` and `queues` on a host
    of `cores` cores; with several processes, ["supervise", processes, threads]."""
    import workers.runtime.engine
    import workers.settings
    from narrator import server
    from workers.app import celery_app
    from workers.settings import get_settings

    monkeypatch.setattr(workers.settings, "cores", lambda: cores)
    # No engine is started: the argv is what is checked (tests/test_engine_process.py tests
    # the early start).
    monkeypatch.setattr(workers.runtime.engine, "start_early", lambda: None)
    monkeypatch.setattr(server, "_supervise_workers", lambda _queues, count, _pool, threads, *_: (
        argv.extend(["supervise", count, threads])))
    monkeypatch.setenv("NARRATOR_ENGINE", engine)
    monkeypatch.setenv("NARRATOR_WORKER_QUEUES", "")  # the command sets it: restored after
    get_settings.cache_clear()
    argv: list[Any] = []
    monkeypatch.setattr(celery_app, "worker_main", argv.extend)
    try:
        server.worker(queues=queues, pool="", concurrency=0, processes=0, loglevel="INFO",
                   banner=True)
    finally:
        get_settings.cache_clear()
    return argv


def test_worker_threads_default_to_cores_on_piper_and_to_engine_slots_on_the_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.settings import WorkerSettings

    # A GPU worker runs a thread per engine slot: no segment waits in a worker that holds
    # more than its engine runs while another worker is idle.
    gpu = _worker_argv(monkeypatch, "vllm-omni", "batch.m17")
    assert gpu[gpu.index("-c") + 1] == str(WorkerSettings().vllm_max_in_flight) == "64"

    # Piper's default worker runs a segment per core (one intra-op thread each).
    piper = _worker_argv(monkeypatch, "piper", "")
    assert piper[piper.index("--pool") + 1] == "threads"
    assert piper[piper.index("-c") + 1] == "4"
    # An assembly worker runs no engine: CPU work on a thread per core, whatever the engine.
    for engine in ("piper", "vllm-omni"):
        argv = _worker_argv(monkeypatch, engine, "assembly")
        assert argv[argv.index("-Q") + 1] == "assembly"
        assert argv[argv.index("--pool") + 1] == "threads"
        assert argv[argv.index("-c") + 1] == "4"


def test_an_assembly_worker_takes_a_process_per_8_cores_and_an_engine_worker_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One process's threads share one GIL (bench.fragments): a worker with no engine runs a
    # process per ASSEMBLY_CORES_PER_PROCESS (8) cores, each with its share of threads.
    assert _worker_argv(monkeypatch, "vllm-omni", "assembly", cores=32) == ["supervise", 4, 8]
    assert _worker_argv(monkeypatch, "vllm-omni", "assembly", cores=16) == ["supervise", 2, 8]
    small = _worker_argv(monkeypatch, "vllm-omni", "assembly", cores=15)
    assert small[small.index("-c") + 1] == "15"  # one process below 16 cores
    # A worker that runs an engine stays one process, however many cores.
    gpu = _worker_argv(monkeypatch, "vllm-omni", "batch.m17", cores=32)
    assert "supervise" not in gpu
    piper = _worker_argv(monkeypatch, "piper", "", cores=32)
    assert piper[piper.index("-c") + 1] == "32"


def test_lexicon_from_a_tsv_file_is_made_then_replaced_and_a_job_speaks_it(
        local_stack: Stack, tmp_path: Path) -> None:
    names = tmp_path / "names.tsv"
    names.write_text("# text\tsaid as\ntomato\tpotato\n", encoding="utf-8")
    run = ("--url", local_stack.url)
    made = subprocess.run(narrator("lexicon", str(names), "--name", "cli-fruit", *run),
                          capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    names.write_text("tomato\t/bənˈænə/\n", encoding="utf-8")  # IPA: Piper's "banana"
    again = subprocess.run(narrator("lexicon", str(names), "--name", "cli-fruit", *run),
                           capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[0] == made.stdout.split()[0]  # the same lexicon, replaced
    chapter, out = tmp_path / "fruit.txt", tmp_path / "fruit.wav"
    chapter.write_text(TOMATO, encoding="utf-8")
    done = subprocess.run(narrator("submit", str(chapter), "--lexicon", "cli-fruit", "--wait",
                                   "--format", "wav", "-o", str(out), *run),
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert fruit_heard(out.read_bytes()) == {"banana"}


def test_submit_a_markdown_book_with_a_cover_title_and_acx_mastering(
        local_stack: Stack, tmp_path: Path) -> None:
    from tests.test_audiobook_files import image, read_back

    book, cover, out = tmp_path / "book.md", tmp_path / "cover.png", tmp_path / "book.mp3"
    book.write_text("# One\n\nThe boats came in at dawn.\n\n# Two\n\nFish were sold by noon.\n",
                    encoding="utf-8")
    cover.write_bytes(image("PNG"))
    done = subprocess.run(narrator("submit", str(book), "--cover", str(cover), "--title",
                                   "Harbour", "--author", "A. Writer", "--mastering", "acx",
                                   "--wait", "-o", str(out), "--url", local_stack.url),
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    found = read_back(out.read_bytes())
    assert {"title": "Harbour", "artist": "A. Writer"}.items() <= found["tags"].items()
    assert found["chapters"] == ["One", "Two"]
    assert found["cover"] == cover.read_bytes()


def test_submit_with_a_cast(local_stack: Stack, tmp_path: Path) -> None:
    import httpx

    scene = tmp_path / "scene.txt"
    scene.write_text('It was late. [voice:Alice] "Who is there?"', encoding="utf-8")
    done = subprocess.run(narrator("submit", str(scene), "--cast", "Alice=joe", "--wait",
                                   "--url", local_stack.url),
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    job = httpx.get(f"{local_stack.url}/v1/audio/jobs/{done.stdout.split()[0]}").json()
    manifest = httpx.get(job["result"]["manifest_url"]).json()
    assert [s.get("speaker") for s in manifest["segments"]] == [None, "alice"]
    refused = subprocess.run(narrator("submit", str(scene), "--cast", "Alice", "--url",
                                      local_stack.url),
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2
    assert "NAME=VOICE" in refused.stderr
