"""The configuration reference and the code say the same thing: docs/configuration.md is what
the settings classes generate, every setting belongs to a documented group, and every
NARRATOR_ variable the code names is a setting or listed as read elsewhere, with why."""

import re
from pathlib import Path

from api.settings import ApiSettings
from narrator.configuration import ELSEWHERE, GROUPS, render
from workers.settings import WorkerSettings

ROOT = Path(__file__).resolve().parent.parent
APP = ["api", "core", "workers", "models", "storage", "narrator", "web"]
# Named in the code but set by Narrator itself, never by a user.
INTERNAL = {"NARRATOR_ENGINE_ADOPT": "a worker hands its running engine to its next image"}


def test_the_reference_is_what_the_classes_generate() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == render(), "run: python -m narrator.configuration > docs/configuration.md"


def test_every_setting_is_in_a_documented_group() -> None:
    grouped = {name for group, _ in GROUPS for name in group.model_fields}
    settings = set(ApiSettings.model_fields) | set(WorkerSettings.model_fields)
    assert settings == grouped
    for group, _ in GROUPS:
        assert ": " in (group.__doc__ or ""), group  # "Title: what it is about"
        for name, field in group.model_fields.items():
            assert field.description, f"{group.__name__}.{name} has no docstring"


def test_every_variable_the_code_names_is_a_setting_or_read_elsewhere_for_a_reason() -> None:
    named = {name for package in APP for path in (ROOT / package).rglob("*.py")
             for name in re.findall(r"NARRATOR_[A-Z0-9_]+", path.read_text())}
    settings = {f"NARRATOR_{name.upper()}" for name in
                set(ApiSettings.model_fields) | set(WorkerSettings.model_fields)}
    elsewhere = {name for name, _, _ in ELSEWHERE}
    assert named - settings - elsewhere - set(INTERNAL) == set()
    assert len(named & settings) > 10  # the scan reads the code
