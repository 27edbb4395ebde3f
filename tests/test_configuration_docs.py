"""The README's configuration table and the settings classes say the same thing: every
setting has a row, every row is a setting (or read where no settings load, listed here with
why), and a plain default written in the table is the code's default."""

import re
from pathlib import Path
from typing import Any

from api.settings import ApiSettings
from workers.settings import WorkerSettings

README = Path(__file__).resolve().parent.parent / "README.md"
# Variables the table documents that no settings class holds, and why.
READ_ELSEWHERE = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OpenTelemetry's own variable",
    "PROMETHEUS_MULTIPROC_DIR": "prometheus_client's own variable",
}
# Settings the table leaves out, and why.
NOT_FOR_USERS = {"WORKER_QUEUES": "set by `narrator worker --queues`, which documents it"}


def _defaults() -> dict[str, Any]:
    return {name.upper(): field.default for cls in (ApiSettings, WorkerSettings)
            for name, field in cls.model_fields.items()}


def _table() -> dict[str, str]:
    """Each variable of the table and its default cell."""
    text = README.read_text()
    section = text[text.index("## Configuration"):text.index("## Architecture")]
    rows: dict[str, str] = {}
    for names, default in re.findall(r"^\| (`[^|]+?) \| ([^|]*?) \|", section, re.M):
        for name in re.findall(r"`([A-Z0-9_]+)`", names):
            rows[name] = default
    return rows


def test_every_setting_has_a_row_and_every_row_a_setting() -> None:
    settings, rows = set(_defaults()), set(_table())
    assert settings - rows - set(NOT_FOR_USERS) == set()
    assert rows - settings - set(READ_ELSEWHERE) == set()


def _same(written: str, default: Any) -> bool:
    if isinstance(default, bool):
        return written == str(default).lower()
    if isinstance(default, int | float):
        return float(written.replace(",", "")) == default
    if isinstance(default, Path):
        return Path(written) == default
    return bool(written == default)


def test_a_plain_default_in_the_table_is_the_codes() -> None:
    """Rows whose default is one literal (`30`, `true`, `wav`); a default the code computes
    (an empty string there: SQLite in DATA_DIR, a path in the package) is described instead."""
    defaults, checked = _defaults(), 0
    for name, cell in _table().items():
        literal = re.fullmatch(r"`(-?[^`]*)`", cell.strip())
        default = defaults.get(name)
        if literal is None or name not in defaults or default in ("", None):
            continue
        written = literal.group(1)
        if isinstance(default, int | float) and not isinstance(default, bool) \
                and not re.fullmatch(r"-?[0-9][0-9,]*(\.[0-9]+)?", written):
            continue
        assert _same(written, default), (name, written, default)
        checked += 1
    assert checked > 40  # most rows are plain literals: the check reads them
