"""Client secrets: short-lived tokens a browser opens `WS /v1/audio/speech/stream` with.

A server that holds an API key asks `POST /v1/audio/speech/stream/client_secrets` for one
and hands it to a browser, which never sees the key. The secret is
`ek_<owner>.<expires_at>.<mac>`: the owner id of the key that asked (the first half of the
key's SHA-256 digest, models.api_key), the Unix time it expires, and an HMAC-SHA256 of both
under the key's whole digest. Nothing is stored: the API checks the MAC against the digest
of a key it knows (NARRATOR_API_KEYS, or an api_keys row not revoked), so a secret dies
with its key, and no one who holds a secret can make another (the digest's second half is
never sent). It opens the WebSocket only; every other route wants the key itself.
"""

import hashlib
import hmac
import re
import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from models.api_key import ApiKey, digest, owner_of_digest

PREFIX = "ek_"
DEFAULT_SECONDS, LEAST_SECONDS, MOST_SECONDS = 600, 10, 7200
_SHAPE = re.compile(r"ek_([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{64})")


def _mac(key_digest: str, owner: str, expires_at: int) -> str:
    return hmac.new(key_digest.encode(), f"{owner}.{expires_at}".encode(),
                    hashlib.sha256).hexdigest()


def mint(key: str, expires_at: int) -> str:
    """Return a client secret for `key`, good until `expires_at` (Unix seconds)."""
    key_digest = digest(key)
    owner = owner_of_digest(key_digest)
    return f"{PREFIX}{owner}.{expires_at}.{_mac(key_digest, owner, expires_at)}"


async def owner_of_secret(secret: str, keys: set[str],
                          sessions: async_sessionmaker[AsyncSession]) -> str | None:
    """Return the owner id a valid, unexpired secret stands for; None otherwise.

    `keys`: NARRATOR_API_KEYS; `sessions`: the API's async sessionmaker (api_keys)."""
    found = _SHAPE.fullmatch(secret)
    if found is None:
        return None
    owner, expires_at, mac = found.group(1), int(found.group(2)), found.group(3)
    if expires_at < time.time():
        return None
    candidates = [d for d in map(digest, keys) if owner_of_digest(d) == owner]
    if not candidates:
        async with sessions() as session:
            candidates = list((await session.scalars(
                select(ApiKey.digest).where(ApiKey.digest.startswith(owner, autoescape=True),
                                            ApiKey.revoked_at.is_(None)))).all())
    for key_digest in candidates:
        if hmac.compare_digest(_mac(key_digest, owner, expires_at), mac):
            return owner
    return None
