"""What a request body's JSON may hold: values every database stores as they were sent.

Postgres refuses a NUL character in text and JSON, and a non-finite number in JSON
(`1e400` parses as infinity); orjson, which digests bodies for idempotency, refuses
integers past 64 bits. SQLite takes all three, so without this check the same body was a
202 embedded and a 500 on Postgres. Each is a 400 that names the field.
"""

import math
from typing import Any

from api.errors import bad_request

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512  # as OpenAI's


def check_storable(value: Any, path: str = "") -> None:
    """Raise a 400 naming the first value under `path` that a database would refuse."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise _refused(where, "must not contain a NUL character (\\u0000)")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise _refused(where, "is outside the 64-bit integer range")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _refused(where, "must be a finite number")
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    raise _refused(where, "has a key with a NUL character (\\u0000)")
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend((f"{where}.{n}" if where else str(n), child)
                         for n, child in enumerate(item))


def check_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Return `metadata` if it is at most 16 keys of up to 64 characters, each with a
    string of up to 512 characters, a number or a boolean; else raise a ValueError."""
    if len(metadata) > METADATA_KEYS:
        raise ValueError(f"at most {METADATA_KEYS} keys ({len(metadata)} given)")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise ValueError(f"key '{key[:20]}...' is over {METADATA_KEY_CHARS} characters")
        if isinstance(value, str) and len(value) > METADATA_VALUE_CHARS:
            raise ValueError(f"'{key}' is over {METADATA_VALUE_CHARS} characters")
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise ValueError(f"'{key}' must be a string, a number, a boolean or null")
    return metadata


def _refused(where: str, why: str) -> Exception:
    return bad_request(f"{where or 'body'}: {why}", where or None, "invalid_value")
