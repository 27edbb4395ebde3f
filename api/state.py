"""Process-wide resources the routes share, created once at start-up."""

import time
from dataclasses import dataclass
from typing import Annotated, Any

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection

from api import client_secrets
from api.catalogue import Catalogue
from api.enqueue import Planner
from api.errors import ApiError
from api.limits import RateLimiter
from api.settings import ApiSettings
from core.channel import Channel
from models.api_key import ApiKey, digest, owner_of, owner_of_digest
from storage import MediaStore


@dataclass(frozen=True)
class KeyPolicy:
    """What a key's jobs get: a share of the engines, and the priorities it may ask for."""

    weight: int = 1
    priorities: frozenset[str] | None = None  # None: the server's JOB_PRIORITIES

    @classmethod
    def of(cls, weight: int, priorities: str | None) -> "KeyPolicy":
        return cls(max(1, weight), None if priorities is None else
                   frozenset(p.strip() for p in priorities.split(",") if p.strip()))


DEFAULT_POLICY = KeyPolicy()


class KeyTable:
    """The api_keys table, as the API reads it: answers cached for a few seconds.

    A key created, changed or revoked with `narrator keys` takes effect within TTL seconds.
    """

    TTL = 5.0

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions
        self._any: tuple[float, bool] = (0.0, False)
        self._known: dict[str, tuple[float, KeyPolicy | None]] = {}
        self._digests: dict[str, str] = {}  # owner id: the digest it was cut from

    async def in_use(self) -> bool:
        """Say whether the table holds any key, revoked or not (then the API is closed)."""
        checked, found = self._any
        if time.monotonic() - checked > self.TTL:
            async with self._sessions() as session:
                found = await session.scalar(select(ApiKey.id).limit(1)) is not None
            self._any = (time.monotonic(), found)
        return found

    async def valid(self, digest: str) -> bool:
        """Say whether a key with this digest exists and is not revoked."""
        return await self._policy(digest) is not None

    async def policy(self, owner: str) -> KeyPolicy:
        """The policy of the stored key whose jobs carry `owner` (models.api_key.owner_of);
        the defaults for a NARRATOR_API_KEYS key and an open API."""
        found = self._digests.get(owner)
        return (await self._policy(found) if found else None) or DEFAULT_POLICY

    async def _policy(self, digest: str) -> KeyPolicy | None:
        checked, policy = self._known.get(digest, (0.0, None))
        if time.monotonic() - checked > self.TTL:
            async with self._sessions() as session:
                row = (await session.execute(
                    select(ApiKey.weight, ApiKey.priorities).where(
                        ApiKey.digest == digest, ApiKey.revoked_at.is_(None)))).first()
            policy = None if row is None else KeyPolicy.of(*row)
            if len(self._known) > 10_000:
                self._known.clear()
                self._digests.clear()
            self._known[digest] = (time.monotonic(), policy)
            self._digests[owner_of_digest(digest)] = digest
        return policy


@dataclass
class State:
    """Everything a request needs: settings, database, broker, channel, storage, catalogue."""

    settings: ApiSettings
    engine: AsyncEngine
    # The same pool in autocommit: one-statement reads and writes skip BEGIN and COMMIT.
    autocommit: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    celery: Celery
    channel: Channel
    store: MediaStore
    catalogue: Catalogue
    keys: KeyTable
    limiter: RateLimiter
    planner: Planner
    failed_auth: RateLimiter  # wrong keys per client address


async def get_state(request: HTTPConnection) -> State:
    """Return the app's shared state (async: a plain def would cost a thread hop)."""
    state: State = request.app.state.narrator
    return state


StateDep = Annotated[State, Depends(get_state)]


async def get_session(state: StateDep) -> Any:
    """Yield a session; routes that write commit it themselves before enqueuing."""
    async with state.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


async def get_owner(request: HTTPConnection, state: StateDep) -> str:
    """Authenticate the caller and return the owner id of its jobs ('' when the API is open).

    Keys come from NARRATOR_API_KEYS and from the api_keys table (`narrator keys`); with
    neither, the API is open (embedded mode).
    """
    keys = state.settings.keys
    if not keys and not await state.keys.in_use():
        await state.limiter.hit("")
        return ""
    token = bearer(request)
    if token.startswith(client_secrets.PREFIX):
        return await _owner_of_secret(request, state, token)
    if token not in keys:  # not a key of the settings: wrong keys are limited per address
        client = request.client.host if request.client else ""
        await state.failed_auth.hit(client, 0)  # past its limit: a 429, and no lookup
        if not token:
            await state.failed_auth.hit(client)
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'",
                           type="authentication_error", code="missing_api_key")
        if not await state.keys.valid(digest(token)):
            await state.failed_auth.hit(client)
            raise ApiError(401, "invalid API key", type="authentication_error",
                           code="invalid_api_key")
    owner = owner_of(token)
    await state.limiter.hit(owner)
    return owner


OwnerDep = Annotated[str, Depends(get_owner)]


KEY_PROTOCOL = "narrator.bearer."  # a browser's WebSocket sends its key as a subprotocol


async def _owner_of_secret(request: HTTPConnection, state: State, secret: str) -> str:
    """The owner of a client secret (api/client_secrets.py), on the WebSocket only."""
    client = request.client.host if request.client else ""
    await state.failed_auth.hit(client, 0)
    if request.scope["type"] != "websocket":
        raise ApiError(401, "a client secret opens WS /v1/audio/speech/stream only: send the "
                       "API key here", type="authentication_error", code="invalid_api_key")
    owner = await client_secrets.owner_of_secret(secret, state.settings.keys, state.sessions)
    if owner is None:
        await state.failed_auth.hit(client)
        raise ApiError(401, "invalid or expired client secret", type="authentication_error",
                       code="invalid_api_key")
    await state.limiter.hit(owner)
    return owner


def bearer(request: HTTPConnection) -> str:
    """Return the request's bearer token, or ''. A WebSocket from a browser, which cannot
    set headers, may offer the subprotocol `narrator.bearer.<key>` instead."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    for offered in request.headers.get("sec-websocket-protocol", "").split(","):
        if offered.strip().startswith(KEY_PROTOCOL):
            return offered.strip().removeprefix(KEY_PROTOCOL)
    return ""


async def metrics_access(request: Request, state: StateDep) -> None:
    """Let /metrics through: open without keys; with keys, METRICS_TOKEN or a valid key."""
    token = state.settings.metrics_token
    if token and bearer(request) == token:
        return
    await get_owner(request, state)
