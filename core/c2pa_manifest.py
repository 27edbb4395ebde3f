"""C2PA manifests: a signed statement, embedded in the file, that a generative model made it.

With an operator's certificate chain and key (C2PA_CERT, C2PA_KEY), every MP3, WAV, FLAC and
m4b a worker makes carries a manifest signed through `c2pa-python` (the Content Authenticity
Initiative's binding of its Rust SDK): a `c2pa.created` action whose digital source type is
IPTC's `trainedAlgorithmicMedia`, the software as its agent, and Narrator's own assertion
with the model, voice and job. It is added after the metadata marks (core/marking.py): the
manifest hashes the file as it then is, and any later change shows as a mismatch. Opus (Ogg)
is not a format the SDK signs; raw PCM and AAC have no place for one.
"""

import io
import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.marking import Provenance, software

MIME = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "m4b": "audio/mp4"}
SOURCE_TYPE = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
ASSERTION = "org.narrator.synthesis"
_LOCK = threading.Lock()  # one signer per process: signing calls take their turn


def manifest(provenance: Provenance, title: str) -> dict[str, Any]:
    """Return the manifest definition of one output."""
    name, _, version = software().partition(" ")
    return {"claim_generator_info": [{"name": name, "version": version or "unknown"}],
            "title": title,
            "assertions": [
                {"label": "c2pa.actions.v2", "data": {"actions": [{
                    "action": "c2pa.created", "digitalSourceType": SOURCE_TYPE,
                    "softwareAgent": {"name": software()}}]}},
                {"label": ASSERTION, "data": provenance.fields()}]}


@lru_cache(maxsize=4)
def signer(cert: str, key: str, alg: str) -> Any:
    """Return the signer of a certificate chain and key (PEM files), built once."""
    import c2pa

    info = c2pa.C2paSignerInfo(alg=alg.encode(), sign_cert=Path(cert).read_bytes(),
                               private_key=Path(key).read_bytes(), ta_url=None)
    return c2pa.Signer.from_info(info)


def sign_bytes(data: bytes, fmt: str, provenance: Provenance, sign: Any) -> bytes:
    """Return an encoded answer with a signed manifest (formats the SDK does not sign come
    back as they are)."""
    if fmt not in MIME:
        return data
    out = io.BytesIO()
    _sign(io.BytesIO(data), out, fmt, provenance, f"speech.{fmt}", sign)
    return out.getvalue()


def sign_file(path: Path, fmt: str, provenance: Provenance, sign: Any) -> None:
    """Sign the file at `path` in place (through a copy beside it)."""
    if fmt not in MIME:
        return
    signed = path.with_name(path.name + ".signed")
    with path.open("rb") as source, signed.open("w+b") as dest:
        _sign(source, dest, fmt, provenance, path.name, sign)
    signed.replace(path)


def read(data: bytes, fmt: str) -> dict[str, Any]:
    """Return the active manifest of `data` and its validation state (what a reader sees)."""
    import c2pa

    reader = c2pa.Reader(MIME[fmt], io.BytesIO(data))
    store = json.loads(reader.json())
    return {"manifest": store["manifests"][store["active_manifest"]],
            "state": str(reader.get_validation_state()),
            "status": store.get("validation_status", [])}


def _sign(source: Any, dest: Any, fmt: str, provenance: Provenance, title: str,
          sign: Any) -> None:
    import c2pa

    with _LOCK, c2pa.Builder(manifest(provenance, title)) as builder:
        builder.sign(sign, MIME[fmt], source, dest)
