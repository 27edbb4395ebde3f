"""Client commands: speak, submit and retry jobs, save lexicons, over the API (narrator.client)."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import httpx
import typer

from narrator.app import DEFAULT_URL, KeyOpt, UrlOpt, cli

if TYPE_CHECKING:
    from narrator.client import Narrator


@contextmanager
def _api(url: str, key: str) -> Iterator["Narrator"]:
    """The API's client (narrator.client); its errors are one line and exit 1, not a trace."""
    from narrator.client import JobFailed, Narrator, NarratorError

    try:
        with Narrator(url, key or None, retries=2) as client:
            yield client
    except httpx.TransportError as exc:
        typer.echo(f"error: no Narrator API answers at {url} ({type(exc).__name__}); start "
                   "one with `narrator serve`, or point --url (NARRATOR_URL) at yours", err=True)
        raise typer.Exit(1) from None
    except NarratorError as exc:
        typer.echo(f"error {exc.status}: {exc.message}", err=True)
        raise typer.Exit(1) from None
    except JobFailed as exc:
        typer.echo(f"job {exc.job['status']}: {exc.job['error']}", err=True)
        raise typer.Exit(1) from None


def _readable(path: Path, *, text: bool) -> str:
    """Read a local file the command sends; a missing, unreadable or (for text) non-UTF-8
    file ends the command with one line that says what to do. Return the text, if text."""
    try:
        data = path.read_bytes()
        return data.decode("utf-8") if text else ""
    except FileNotFoundError:
        _fail(f"no such file: {path}")
    except IsADirectoryError:
        _fail(f"{path} is a folder: give a file")
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        _fail(f"{path} is not UTF-8 text (byte {exc.start} is not): save it as UTF-8, for "
              f"example `iconv -f latin1 -t utf-8 {path} > {path.stem}.utf8{path.suffix}`")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


LexiconOpt = Annotated[list[str] | None, typer.Option(
    "--lexicon", help="a pronunciation lexicon's name or id (repeat for more; first wins)")]


@cli.command()
def lexicon(file: Annotated[Path, typer.Argument(help="JSON entries, or lines 'text<TAB>alias' "
                                                 "('text<TAB>/ipa/' for phonemes)")],
            name: Annotated[str, typer.Option(help="the lexicon's name")],
            url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Create the lexicon NAME from FILE, or replace the one of that name."""
    import json

    raw = _readable(file, text=True)
    if file.suffix == ".json":
        try:
            loaded = json.loads(raw)
        except json.JSONDecodeError as exc:
            _fail(f"{file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
        entries = loaded.get("entries") if isinstance(loaded, dict) else loaded
        if not isinstance(entries, list):
            _fail(f"{file}: give a list of entries, or an object with an \"entries\" list, "
                  'each {"text": ..., "alias": ...} or {"text": ..., "ipa": ...}')
    else:
        entries = [_entry(*line.split("\t", 1)) for line in raw.splitlines()
                   if line.strip() and not line.startswith("#") and "\t" in line]
    with _api(url, api_key) as client:
        made = client.save_lexicon(name, entries)
    typer.echo(f"{made['id']}  {made['name']}: {made['entry_count']} entries")


def _entry(text: str, say: str) -> dict[str, str]:
    say = say.strip()
    if len(say) > 2 and say.startswith("/") and say.endswith("/"):
        return {"text": text.strip(), "ipa": say[1:-1]}
    return {"text": text.strip(), "alias": say}


@cli.command()
def say(text: str, output: Annotated[Path, typer.Option("-o", "--output")],
        voice: str = "", model: str = "", speed: float = 1.0, lexicon: LexiconOpt = None,
        url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Speak TEXT into FILE; the format comes from the file's extension."""
    fmt = {"ogg": "opus"}.get(output.suffix.lstrip("."), output.suffix.lstrip(".") or "mp3")
    with _api(url, api_key) as client:
        audio = client.speak(text, voice=voice or None, model=model or None,
                             response_format=fmt, speed=speed,
                             **({"lexicons": lexicon} if lexicon else {}))
    output.write_bytes(audio)
    typer.echo(f"{output}: {audio.duration} s")


@cli.command()
def submit(file: Annotated[Path, typer.Argument(help="plain text, Markdown (.md: headings "
                                                "become chapters) or an EPUB")],
           wait: bool = False,
           output: Annotated[Path | None, typer.Option("-o", "--output")] = None,
           fmt: Annotated[str, typer.Option("--format")] = "mp3", voice: str = "",
           lexicon: LexiconOpt = None,
           cover: Annotated[Path | None, typer.Option(help="a JPEG or PNG for the files")] = None,
           title: Annotated[str, typer.Option(help="the book's title (tags)")] = "",
           author: Annotated[str, typer.Option(help="the book's author (tags)")] = "",
           mastering: Annotated[str, typer.Option(help="'acx': ACX-ready MP3 chapters")] = "",
           subtitles: Annotated[str, typer.Option(
               help="comma-separated: srt, vtt, words (a JSON word track)")] = "",
           cast: Annotated[list[str] | None, typer.Option(
               help="NAME=VOICE: [voice:NAME] marks speak in VOICE (repeat for more)")] = None,
           priority: Annotated[str, typer.Option(
               help="high, normal or low: which waiting work the engines take first")] = "",
           url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = "") -> None:
    """Submit FILE as a job; with --wait, follow it and download the audio."""
    _readable(file, text=file.suffix.lower() != ".epub")
    if cover is not None:
        _readable(cover, text=False)
    fields: dict[str, Any] = {"response_format": fmt}
    if subtitles:
        fields["subtitles"] = [kind.strip() for kind in subtitles.split(",") if kind.strip()]
    fields |= {k: v for k, v in (("voice", voice), ("lexicons", lexicon),
                                 ("mastering", mastering), ("priority", priority)) if v}
    pairs = [entry.partition("=") for entry in cast or []]
    if any(not name.strip() or not sep or not voice_id.strip() for name, sep, voice_id in pairs):
        raise typer.BadParameter("give --cast as NAME=VOICE", param_hint="--cast")
    fields |= {"cast": {n.strip(): v.strip() for n, _, v in pairs}} if pairs else {}
    book = {k: v for k, v in (("title", title), ("author", author)) if v}
    fields |= {"book": book} if book else {}
    with _api(url, api_key) as client:
        job = client.submit(file, cover=cover, **fields)
        typer.echo(job["id"])
        if not wait and output is None:
            return
        job = _follow(client, job)
        if output is not None:
            client.download(job, output)
            typer.echo(f"{output}: {job['result']['duration_seconds']:.1f} s")


@cli.command()
def retry(job_id: str, wait: bool = False, url: UrlOpt = DEFAULT_URL,
          api_key: KeyOpt = "") -> None:
    """Run a failed job again: only what did not finish; with --wait, follow it."""
    with _api(url, api_key) as client:
        job = client.retry(job_id)
        segments = job["segments"]
        typer.echo(f"{job['id']}: {job['status']}, {segments['done']}/{segments['total']} "
                   "segments kept")
        if wait:
            _follow(client, job)


def _follow(client: "Narrator", job: dict[str, Any]) -> dict[str, Any]:
    """Wait for a job, drawing a progress bar with the server's ETA on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    def eta(seconds: float | None) -> str:
        if seconds is None:
            return "eta -"
        minutes, secs = divmod(int(seconds), 60)
        return f"eta {minutes // 60}:{minutes % 60:02d}:{secs:02d}"

    columns = (TextColumn("{task.description:<11}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[segments]}"), TextColumn("{task.fields[eta]}"))
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(job["status"], total=100, segments="", eta=eta(None))

        def show(state: dict[str, Any]) -> None:
            segments = state.get("segments") or {}
            bar.update(task, completed=state["progress"], description=state["status"],
                       segments=f"{segments.get('done', 0)}/{segments.get('total', 0)} segments",
                       eta=eta(state.get("eta_seconds")))

        return client.wait(job, progress=show)
