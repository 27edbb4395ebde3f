"""What a worker puts in its outputs to say they are synthetic: the metadata marks
(MARK_OUTPUT, core/marking.py) and, with an operator's key, a signed C2PA manifest
(C2PA_CERT, core/c2pa_manifest.py), in that order."""

from pathlib import Path
from typing import Any

from core import c2pa_manifest
from core.marking import Provenance, mark_bytes, mark_file
from workers.settings import get_settings


def _signer() -> Any:
    settings = get_settings()
    if not settings.c2pa_cert:
        return None
    return c2pa_manifest.signer(settings.c2pa_cert, settings.c2pa_key, settings.c2pa_alg)


def marking() -> bool:
    """Say whether outputs are marked (MARK_OUTPUT)."""
    return get_settings().mark_output


def mark_answer(data: bytes, fmt: str, made: Provenance) -> bytes:
    """Return a sync answer's encoded bytes marked, and signed where a key is configured."""
    if get_settings().mark_output:
        data = mark_bytes(data, fmt, made)
    sign = _signer()
    return c2pa_manifest.sign_bytes(data, fmt, made, sign) if sign is not None else data


def mark_files(paths: list[Path], fmt: str, made: Provenance, tagged: bool) -> None:
    """Mark a job's finished files (`tagged`: their tags already carry the marks), then sign
    them where a key is configured."""
    if get_settings().mark_output and not tagged:
        for path in paths:
            mark_file(path, fmt, made)
    sign = _signer()
    if sign is not None:
        for path in paths:
            c2pa_manifest.sign_file(path, fmt, made, sign)
