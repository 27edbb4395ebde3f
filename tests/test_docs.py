"""The documentation says what the software does, not how it was built, and its examples run:
no work-session history anywhere in the repository, a short README, the README's streaming
example through the official OpenAI SDK against a real stack, and the guides' examples."""

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import openai

from tests.support import Stack

ROOT = Path(__file__).resolve().parent.parent
HISTORY = re.compile(r"\bsession \d", re.IGNORECASE)


def test_no_file_of_the_repository_narrates_work_sessions() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    # This file names the pattern it looks for.
    found = [name for name in files if name != "tests/test_docs.py"
             and (ROOT / name).is_file() and HISTORY.search(
                 (ROOT / name).read_bytes().decode("utf-8", errors="ignore"))]
    assert found == []


def test_result_files_the_docs_and_code_name_are_kept() -> None:
    """bench/results keeps the latest result of each benchmark; a page or module that cites a
    file there cites one that exists. The GPU measurements' history names superseded runs,
    which its header sends to git history."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    results = {Path(f).name for f in files if f.startswith("bench/results/")}
    assert not any(re.search(r"_s\d+[_.]", name) for name in results)  # no run-numbered names
    missing = []
    for name in files:
        if name.startswith("bench/results/") or name == "docs/gpu-measurements.md" \
                or not name.endswith((".md", ".py", ".sh", ".yaml")):
            continue
        for cited in re.findall(r"bench/results/([A-Za-z0-9_.*-]+\.[a-z]+|[A-Za-z0-9_.-]+\*)",
                                (ROOT / name).read_text()):
            if cited not in ("*.json", "*.tmp") and not list((ROOT / "bench/results").glob(cited)):
                missing.append(f"{name}: {cited}")
    assert missing == []


def test_the_performance_page_states_the_latest_result_files() -> None:
    from bench.report import BEGIN, END, PAGE, render

    page = PAGE.read_text()
    assert page[page.index(BEGIN):page.index(END) + len(END)] == render(), \
        "run: python -m bench.report --write"


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for page in re.findall(r"\]\((docs/[^)#]+)", readme):  # every page it points at exists
        assert (ROOT / page).is_file(), page


def test_the_readmes_streaming_example_streams(local_stack: Stack) -> None:
    """As the README shows it: the SDK's streaming call with stream_format and pcm."""
    client = openai.OpenAI(base_url=f"{local_stack.url}/v1", api_key="unused")
    with client.audio.speech.with_streaming_response.create(
            model="piper", voice="joe", input="Streamed, piece by piece. And then some more.",
            response_format="pcm", stream_format="audio") as response:
        rate = int(response.headers["x-sample-rate"])
        chunks = [chunk for chunk in response.iter_bytes() if chunk]
    audio = b"".join(chunks)
    assert rate == 22050
    assert len(chunks) > 1  # it came in pieces
    assert len(audio) / 2 / rate > 1.0  # over a second of 16-bit mono speech


def python_blocks(page: str) -> list[str]:
    """The ```python examples of a docs page, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), re.DOTALL)


def test_the_speech_guides_examples_run(local_stack: Stack, tmp_path: Path,
                                        monkeypatch: Any) -> None:
    """Each Python example of the sync and streaming guide, as written, against a real stack
    (only the address changed): a whole WAV, streamed PCM, server-sent events, and text
    streamed in over the WebSocket."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks("guides/speech.md")
    assert len(blocks) == 4
    spaces: list[dict[str, Any]] = [{} for _ in blocks]
    socket = local_stack.url.replace("http://", "ws://")
    for block, space in zip(blocks, spaces, strict=True):
        exec(block.replace("http://127.0.0.1:8000", local_stack.url)
             .replace("ws://127.0.0.1:8000", socket), space)
    assert (tmp_path / "hello.wav").read_bytes()[:4] == b"RIFF"
    assert spaces[1]["rate"] == 22050
    assert (tmp_path / "streamed.pcm").stat().st_size / 2 / 22050 > 0.5
    assert len(spaces[2]["pcm"]) / 2 / 22050 > 0.5
    assert len(spaces[3]["pcm"]) / 2 / 22050 > 1.0  # two sentences from five tokens


def test_the_webhook_guides_check_accepts_narrators_signature_only() -> None:
    from workers.jobs.webhooks import sign

    space: dict[str, Any] = {}
    [block] = python_blocks("guides/webhooks.md")
    exec(block, space)
    verify, body, now = space["verify"], b'{"id": "job_1"}', int(time.time())
    assert verify("s3cret", sign("s3cret", now, body), body)
    assert not verify("other", sign("s3cret", now, body), body)
    assert not verify("s3cret", sign("s3cret", now, body), body + b" ")
    assert not verify("s3cret", sign("s3cret", now - 3600, body), body)  # replayed
    assert not verify("s3cret", "v1=abc", body)
    assert not verify("s3cret", "t=x,v1=abc", body)
