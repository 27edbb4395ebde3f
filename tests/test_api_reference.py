"""The API reference and the app say the same thing: docs/api.md is what the app's OpenAPI
schema generates, every route says what it does, and every body field has a meaning."""

from pathlib import Path
from typing import Any

from narrator.api_reference import render, schema

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_is_what_the_app_generates() -> None:
    written = (ROOT / "docs" / "api.md").read_text()
    assert written == render(), "run: python -m narrator.api_reference > docs/api.md"


def test_every_route_and_body_field_is_described() -> None:
    spec = schema()
    models: dict[str, Any] = dict(spec["components"]["schemas"])
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            assert operation.get("description"), f"{method.upper()} {path}: no docstring"
            for entry in operation.get("requestBody", {}).get("content", {}).values():
                models.update(entry["schema"].get("$defs", {}))
                body = entry["schema"]
                body = models[body["$ref"].rsplit("/", 1)[1]] if "$ref" in body else body
                for name, prop in body.get("properties", {}).items():
                    assert prop.get("description"), f"{method.upper()} {path}: {name}"
